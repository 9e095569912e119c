"""Designs built before they are needed: asked for by the api, built by one
renderer, stored in Redis and loaded (not rebuilt) by every other renderer
process, against the module's real redis-server (tests/unit/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from ticketry import designs, fonts, streams
from ticketry.db import entries_of
from ticketry_renderer import designs as stored
from ticketry_renderer import fastpath
from ticketry_renderer.render import Design, build_event_template, event_template, render_ticket, template_key

from tests.helpers import decode_qr
from tests.unit.test_render_fidelity import Signer, request, text_of


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the events whose design was built (rather than loaded)."""
    seen: list[str] = []
    real = stored.build_event_template

    def counting(t: Any, design: Design) -> Any:
        seen.append(t.event_name)
        return real(t, design)

    monkeypatch.setattr(stored, "build_event_template", counting)
    return seen


def test_a_design_survives_being_stored() -> None:
    # A template, serialized and loaded back, stamps the same bytes
    design, signer = Design.default(), Signer()
    req = request(signer, "山田 太郎")
    template = event_template(req, design)
    assert template is not None
    again = stored.loads(stored.dumps(template))
    assert again is not None and again.stamp(req) == template.stamp(req)
    assert stored.loads(stored.dumps(None)) is None
    with pytest.raises(ValueError, match="not a stored design"):
        stored.loads(b"PK\x03\x04 not a design")


async def test_a_requested_design_is_built_once_and_loaded_everywhere(redis: Redis, builds: list[str]) -> None:
    signer = Signer()
    sample = request(signer, event_name="Opening Night", tier="balcony", tier_name="Balcony")
    # Given the api asked for the design of a new event's tier
    ids = await designs.request_designs(redis, [sample])
    assert len(ids) == 1

    # When one renderer process (group designers) handles the request
    from ticketry_renderer.config import RendererSettings
    from ticketry_renderer.handlers import BatchPipeline

    settings = RendererSettings.model_construct()  # the worker only needs its Redis here
    first = BatchPipeline(redis=redis, settings=settings, consumer="r1", design=Design.default())
    got: Any = await redis.xreadgroup(streams.DESIGNERS_GROUP, "r1", {streams.DESIGN_REQUESTS: ">"}, count=10)
    assert await first.build_designs(entries_of(got)) == 1

    # Then it is stored and the request acked
    name = stored.digest(template_key(sample, first.design))
    assert await redis.exists(streams.design(name)) == 1
    pending: Any = await redis.xpending(streams.DESIGN_REQUESTS, streams.DESIGNERS_GROUP)
    assert pending["pending"] == 0

    # And another process renders the event's first ticket from the stored design, without building it
    other = Design.default()
    ticket = request(signer, "Nguyễn Văn An", event_name="Opening Night", tier="balcony", tier_name="Balcony")
    assert await stored.prepare(redis, other, [ticket], "r2") == 0
    pdf = render_ticket(ticket, other)
    assert other.fast_rendered == 1 and other.full_rendered == 0
    assert decode_qr(pdf) == ticket.code and "Nguyễn Văn An" in text_of(pdf)
    assert builds == ["Opening Night"]


async def test_two_processes_never_build_the_same_design(redis: Redis, builds: list[str]) -> None:
    # Given two renderer processes meeting a new event's first tickets at the same time
    signer = Signer()
    a, b = Design.default(), Design.default()
    reqs = [request(signer, event_name="Same Night") for _ in range(2)]

    # When both prepare its design
    built = await asyncio.gather(stored.prepare(redis, a, reqs[:1], "r1"), stored.prepare(redis, b, reqs[1:], "r2"))

    # Then one built it, the other loaded it, and both stamp from it
    assert sorted(built) == [0, 1] and builds == ["Same Night"]
    for design, req in ((a, reqs[0]), (b, reqs[1])):
        render_ticket(req, design)
        assert design.fast_rendered == 1


async def test_an_event_waits_for_its_designs_only_while_a_renderer_can_build_them(redis: Redis) -> None:
    from ticketry_renderer.config import RendererSettings
    from ticketry_renderer.handlers import BatchPipeline

    signer = Signer()
    samples = [
        request(signer, event_name="Tiered Night", tier=t, tier_name=t.title(), lane=lane)
        for t, lane in (("standard", "standard"), ("vip", "vip"))
    ]
    ids = await designs.request_designs(redis, samples)
    # Given no renderer has ever read the requests: the wait gives up at once, the requests stay
    assert await designs.designers_live(redis) == 0
    assert await designs.wait_built(redis, ids, 600) is False
    assert await redis.xlen(streams.DESIGN_REQUESTS) == 2

    # When two renderers each read one request (live, reading), the event's designs are not built yet
    settings = RendererSettings.model_construct()
    workers = [BatchPipeline(redis=redis, settings=settings, consumer=c, design=Design.default()) for c in ("r1", "r2")]
    reads = []
    for w in workers:
        got: Any = await redis.xreadgroup(streams.DESIGNERS_GROUP, w.consumer, {streams.DESIGN_REQUESTS: ">"}, count=1)
        reads.append(entries_of(got))
    assert await designs.designers_live(redis) == 2
    assert not await designs.handled(redis, ids)
    # and a bounded wait ends unbuilt
    assert await designs.wait_built(redis, ids, 0.05) is False
    waiting = asyncio.create_task(designs.wait_built(redis, ids, 600))

    # Then one built design is not enough
    assert await workers[0].build_designs(reads[0]) == 1
    assert not await designs.handled(redis, ids)
    assert not waiting.done()
    # and the wait ends when both are built
    assert await workers[1].build_designs(reads[1]) == 1
    assert await waiting is True
    assert await designs.handled(redis, ids)


def _forget_fonts() -> None:
    for cached in (fonts.chain, fonts.fingerprint, fonts._covered, fonts.shape, fastpath._subsetters):
        cached.cache_clear()


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[tuple[str, ...]], None]]:
    """Makes this process a host whose installed fonts of the chain are the ones
    given (the font caches emptied on the way, and again at the end)."""

    def become(chain: tuple[str, ...]) -> None:
        monkeypatch.setattr(fonts, "CHAIN", chain)
        _forget_fonts()

    yield become
    monkeypatch.undo()
    _forget_fonts()


def test_hosts_with_other_fonts_build_their_own_designs(host: Callable[[tuple[str, ...]], None]) -> None:
    design, signer = Design.default(), Signer()
    req = request(signer, "Ada Lovelace")
    whole = fonts.CHAIN
    # Given a design built on a host without the CJK font (one holder font reserved fewer)
    host(tuple(f for f in whole if "CJK" not in f))
    there_key, there = template_key(req, design), build_event_template(req, design)
    assert there is not None and len(there.holder.fonts) == len(fonts.chain()) == len(whole) - 1

    # When a host with the whole chain looks for the design of the same event
    host(whole)
    here_key = template_key(req, design)

    # Then it looks under another name, so builds its own
    assert stored.digest(here_key) != stored.digest(there_key)
    here = build_event_template(req, design)
    assert here is not None and decode_qr(here.stamp(request(signer, "山田 太郎"))) is not None
    # And the other host's design, were it given here, is not stamped (the ticket is rendered in full)
    with pytest.raises(fastpath.Unsupported, match="another chain"):
        there.stamp(request(signer, "山田 太郎"))
