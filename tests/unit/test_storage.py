"""The PDF store port (ticketry.storage) and both adapters: files in a tmp dir,
and objects on a real S3-compatible server (versitygw from .bin/, started here)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from ticketry.ids import new_id, ticket_ids
from ticketry.pdfstores import open_store
from ticketry.s3store import S3Store
from ticketry.settings import CommonSettings
from ticketry.storage import LocalStore, PdfStore, StorageUnavailable
from ticketry_devstack.procs import S3_ACCESS_KEY, S3_SECRET_KEY, free_port, s3_proc

from tests.helpers import serving

PDF = b"%PDF-1.7\n% a ticket\n%%EOF\n"


@pytest.fixture(scope="module")
def s3_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """versitygw started for this module, stopped after it."""
    data = tmp_path_factory.mktemp("unit-s3")
    with serving(lambda port: s3_proc(data, port)) as port:
        yield f"http://127.0.0.1:{port}"


def s3_store(url: str, *, public: str | None = None, bucket: str | None = None) -> S3Store:
    return S3Store(
        bucket=bucket or f"t-{secrets.token_hex(6)}", endpoint_url=url, public_endpoint_url=public,
        region="us-east-1", access_key_id=S3_ACCESS_KEY, secret_access_key=S3_SECRET_KEY, presign_ttl_s=60,
    )  # fmt: skip


@pytest.fixture(params=["local", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[PdfStore]:
    """Each adapter, empty: a fresh directory, or a fresh bucket (created by its first call)."""
    made: PdfStore = (
        LocalStore(tmp_path / "tickets") if request.param == "local" else s3_store(request.getfixturevalue("s3_url"))
    )
    try:
        yield made
    finally:
        await made.aclose()


async def test_stored_pdfs_are_read_back_listed_and_deleted_by_order(store: PdfStore) -> None:
    # Given two orders' PDFs stored in one batch
    one, other = new_id("or"), new_id("or")
    mine, theirs = ticket_ids(one, 10), ticket_ids(other, 2)
    outcomes = await store.put_all([(one, t, PDF + t.encode()) for t in mine] + [(other, t, PDF) for t in theirs])
    assert outcomes == [None] * 12
    # Then each reads back, and a listing of some of them finds just those
    assert await store.read(one, mine[7]) == PDF + mine[7].encode()
    assert await store.exists(one, mine[0]) and not await store.exists(one, ticket_ids(one, 11)[10])
    assert await store.stored(one, [mine[3], mine[4], mine[9]]) == {mine[3], mine[4], mine[9]}
    assert await store.stored(one, [*mine[8:], *ticket_ids(one, 12)[10:]]) == set(mine[8:])
    # (a whole batch's worth at once too: ten stored of twelve asked)
    assert await store.stored(one, ticket_ids(one, 12)) == set(mine)
    assert await store.read(one, ticket_ids(one, 12)[11]) is None
    # When one order's PDFs are deleted (twice: it is idempotent)
    await store.delete_order(one)
    await store.delete_order(one)
    # Then they are gone and the other order's are not
    assert await store.stored(one, mine) == set()
    assert await store.read(one, mine[0]) is None
    assert await store.stored(other, theirs) == set(theirs)


async def test_a_wallet_pass_is_kept_beside_its_pdf_and_goes_with_its_order(store: PdfStore) -> None:
    # Given a ticket's PDF and then its pass
    order = new_id("or")
    (tid,) = ticket_ids(order, 1)
    await store.put_all([(order, tid, PDF)])
    assert await store.read_pass(order, tid) is None
    await store.put_pass(order, tid, b"PK-pass")
    # Then the pass reads back, apart from the PDF, and the PDF listing is unchanged
    assert await store.read_pass(order, tid) == b"PK-pass"
    assert await store.read(order, tid) == PDF
    assert await store.stored(order, [tid]) == {tid}
    # When the order's files are deleted, the pass goes too
    await store.delete_order(order)
    assert await store.read_pass(order, tid) is None


async def test_a_bad_item_fails_alone(store: PdfStore) -> None:
    order = new_id("or")
    good = ticket_ids(order, 2)
    outcomes = await store.put_all([(order, good[0], PDF), (order, "tk_../../etc", PDF), (order, good[1], PDF)])
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], ValueError)
    assert await store.stored(order, good) == set(good)


async def test_local_store_serves_itself_and_s3_presigns(tmp_path: Path, s3_url: str) -> None:
    order = new_id("or")
    (tk,) = ticket_ids(order, 1)
    local = LocalStore(tmp_path)
    assert await local.download_url(order, tk) is None
    # A presigned URL is built for where buyers reach the store, and fetches the PDF as a download
    s3 = s3_store(s3_url, public=s3_url.replace("127.0.0.1", "localhost"))
    try:
        assert await s3.put_all([(order, tk, PDF)]) == [None]
        url = await s3.download_url(order, tk)
        assert url is not None and url.startswith(s3_url.replace("127.0.0.1", "localhost") + "/")
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.get(url)
            assert r.status_code == 200, r.text
            assert r.content == PDF
            assert r.headers["content-type"] == "application/pdf"
            assert r.headers["content-disposition"] == f'attachment; filename="{tk}.pdf"'
            # ... and only that object: the signature covers the key
            assert (await client.get(url.replace(tk, ticket_ids(order, 2)[1]))).status_code == 403
    finally:
        await s3.aclose()


async def test_an_unreachable_store_is_unavailable_not_missing() -> None:
    s3 = s3_store(f"http://127.0.0.1:{free_port()}")
    order = new_id("or")
    (tk,) = ticket_ids(order, 1)
    try:
        with pytest.raises(StorageUnavailable):
            await s3.exists(order, tk)
        # A renderer's batch gets one failure per item (each retried), not an exception
        outcomes = await s3.put_all([(order, tk, PDF)])
        assert isinstance(outcomes[0], StorageUnavailable)
    finally:
        await s3.aclose()


def test_settings_pick_the_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKETRY_STORAGE_DIR", str(tmp_path))
    assert isinstance(open_store(CommonSettings()), LocalStore)
    monkeypatch.setenv("TICKETRY_STORAGE_BACKEND", "s3")
    monkeypatch.setenv("TICKETRY_S3_SECRET_ACCESS_KEY", "not-printed")
    monkeypatch.setenv("TICKETRY_S3_ENDPOINT_URL", "")  # compose's ${VAR:-}: not set (AWS)
    settings = CommonSettings()
    assert settings.s3_endpoint_url is None
    assert isinstance(open_store(settings), S3Store)
    assert "not-printed" not in repr(settings)
