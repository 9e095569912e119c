"""The scaler's pure policy: replica counts from backlog, rate and stabilisation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from ticketry_scaler.config import ScalerSettings
from ticketry_scaler.policy import (
    LaneBacklog,
    PolicyConfig,
    Stabiliser,
    Throughput,
    ThroughputMeter,
    decide,
    desired_replicas,
    drain_estimate_s,
    finished,
    lane_lag,
    per_renderer_rate,
    plateau,
    recommend,
)

CFG = PolicyConfig(
    minimum=1,
    maximum=4,
    target_drain_s=30.0,
    default_rate=5.0,
    up_window_s=0.0,
    down_window_s=60.0,
    cooldown_s=15.0,
)


@pytest.mark.parametrize(
    ("lane", "expected"),
    [
        (LaneBacklog("s", lag=7, pending=3, length=100), 7),
        # NULL lag: the observer's counted entries win over the XLEN arithmetic.
        (LaneBacklog("s", lag=None, pending=3, undelivered=12, length=100), 12),
        # NULL lag, nothing counted: XLEN minus the PEL (an over-estimate, on purpose).
        (LaneBacklog("s", lag=None, pending=3, length=100), 97),
        (LaneBacklog("s", lag=None, pending=5, length=2), 0),
        (LaneBacklog("s", lag=-1, pending=0), 0),
    ],
    ids=["lag", "null-lag-scanned", "null-lag-length", "null-lag-never-negative", "clamped"],
)
def test_lane_lag(lane: LaneBacklog, expected: int) -> None:
    assert lane_lag(lane) == expected


@pytest.mark.parametrize(
    ("rates", "expected"),
    [
        ((), (5.0, False)),
        ((0.0, 0.01), (5.0, False)),  # idle renderers say nothing about speed
        ((10.0, 0.0, 20.0), (15.0, True)),
        ((8.0,), (8.0, True)),
        ((math.nan, 4.0), (4.0, True)),
    ],
)
def test_per_renderer_rate(rates: tuple[float, ...], expected: tuple[float, bool]) -> None:
    assert per_renderer_rate(rates, 5.0) == expected


@pytest.mark.parametrize(
    ("lag", "pending", "rate", "target", "minimum", "maximum", "expected"),
    [
        (0, 0, 5.0, 30, 1, 8, 1),  # idle: the floor
        (0, 0, 5.0, 30, 0, 8, 0),  # scale to zero allowed when min is 0
        (1, 0, 5.0, 30, 0, 8, 1),  # any work wakes one renderer from zero
        (0, 1, 5.0, 30, 0, 8, 1),  # pending alone is work (reclaimed entries)
        (150, 0, 5.0, 30, 1, 8, 1),  # exactly one renderer's 30 s worth
        (151, 0, 5.0, 30, 1, 8, 2),
        (100, 50, 5.0, 30, 1, 8, 1),  # lag and pending are summed
        (100, 51, 5.0, 30, 1, 8, 2),
        (3000, 0, 5.0, 30, 1, 4, 4),  # capped at max
        (3000, 0, 50.0, 30, 1, 8, 2),  # fast renderers need fewer
        (3000, 0, 5.0, 10, 1, 100, 60),  # tighter target needs more
        (10, 0, 0.0, 30, 1, 8, 8),  # a zero rate cannot drain: max
        (0, 0, 5.0, 30, 3, 8, 3),
    ],
)
def test_desired_replicas(
    lag: int, pending: int, rate: float, target: float, minimum: int, maximum: int, expected: int
) -> None:
    got = desired_replicas(lag, pending, rate, target_drain_s=target, minimum=minimum, maximum=maximum)
    assert got == expected


@pytest.mark.parametrize(
    ("work", "replicas", "rate", "expected"),
    [(0, 0, 5.0, 0.0), (100, 2, 5.0, 10.0), (100, 0, 5.0, math.inf), (100, 2, 0.0, math.inf)],
)
def test_drain_estimate(work: int, replicas: int, rate: float, expected: float) -> None:
    assert drain_estimate_s(work, replicas, rate) == expected


def test_recommend_sums_lanes_and_explains() -> None:
    lanes = [
        LaneBacklog("vip", lag=10, pending=2),
        LaneBacklog("std", lag=None, pending=8, undelivered=2980, length=3000),
    ]
    rec = recommend(lanes, [0.0], current=1, cfg=CFG)
    assert (rec.lag, rec.pending, rec.replicas) == (2990, 10, 4)
    assert (rec.rate, rec.rate_measured) == (5.0, False)
    assert rec.drain_s == pytest.approx(3000 / 5.0)
    assert "backlog 3000" in rec.reason and "needs 20" in rec.reason
    assert "capped at max 4" in rec.reason


def test_recommend_uses_measured_rate() -> None:
    rec = recommend([LaneBacklog("std", lag=600, pending=0)], [10.0, 10.0], current=2, cfg=CFG)
    assert (rec.replicas, rec.rate_measured) == (2, True)
    assert "measured" in rec.reason


# Each step: (seconds since start, raw recommendation, current replicas, expected replicas).
Step = tuple[float, int, int, int]


@pytest.mark.parametrize(
    ("cfg", "steps"),
    [
        pytest.param(CFG, [(0, 4, 1, 4)], id="up-at-once"),
        pytest.param(CFG, [(0, 1, 1, 1), (1, 1, 1, 1)], id="steady"),
        pytest.param(
            CFG,
            # backlog gone at t=20: the 4 recommended at t=0..10 hold it until t>70.
            [(0, 4, 1, 4), (10, 4, 4, 4), (20, 1, 4, 4), (69, 1, 4, 4), (71, 1, 4, 1)],
            id="down-after-window",
        ),
        pytest.param(
            CFG,
            # the down-window takes the *highest* recent recommendation: 3, then (after
            # the cooldown of that change) 2.
            [(0, 4, 1, 4), (10, 3, 4, 4), (30, 2, 4, 4), (61, 1, 4, 3), (71, 1, 3, 3), (77, 1, 3, 2)],
            id="down-in-steps",
        ),
        pytest.param(
            PolicyConfig(1, 4, 30, 5, up_window_s=0, down_window_s=0, cooldown_s=15),
            # no window, but the cooldown after the change at t=0 holds the scale-down.
            [(0, 4, 1, 4), (5, 1, 4, 4), (14, 1, 4, 4), (16, 1, 4, 1)],
            id="cooldown",
        ),
        pytest.param(
            PolicyConfig(1, 8, 30, 5, up_window_s=10, down_window_s=0, cooldown_s=0),
            # a 10 s up-window takes the *lowest*: a one-tick spike does not scale up.
            [(0, 1, 1, 1), (1, 8, 1, 1), (5, 8, 1, 1), (11.5, 8, 1, 8)],
            id="up-window",
        ),
        pytest.param(
            CFG,
            # below min (e.g. someone scaled the Deployment by hand): back up at once.
            [(0, 1, 0, 1)],
            id="restore-floor",
        ),
        pytest.param(
            CFG,
            # above max (e.g. max lowered): down to the bounded recommendation.
            [(0, 4, 9, 4)],
            id="restore-ceiling",
        ),
    ],
)
def test_stabiliser(cfg: PolicyConfig, steps: list[Step]) -> None:
    stab = Stabiliser.from_config(cfg)
    for t, raw, current, expected in steps:
        # lag = raw x one renderer's 30 s at the default 5/s, so the raw recommendation is `raw`.
        rec = recommend([LaneBacklog("s", lag=raw * 150, pending=0)], [], current=current, cfg=cfg)
        decision = decide(stab, t, rec, current)
        assert decision.replicas == expected, (t, decision.reason)
        assert decision.changed == (expected != current)


def test_decision_reason_names_the_hold() -> None:
    stab = Stabiliser.from_config(CFG)
    up = recommend([LaneBacklog("s", lag=600, pending=0)], [], current=1, cfg=CFG)
    idle = recommend([LaneBacklog("s", lag=0, pending=0)], [], current=4, cfg=CFG)
    assert decide(stab, 0, up, 1).reason.startswith("scale-up")
    held = decide(stab, 30, idle, 4)
    assert not held.changed and "down-window" in held.reason
    down = decide(stab, 61, idle, 4)
    assert down.changed and down.reason.startswith("scale-down") and "backlog 0" in down.reason


# -- the throughput policy (local backend): burst and plateau ---------------------------

TP = PolicyConfig(minimum=1, maximum=4, target_drain_s=20.0, default_rate=200.0, burst_s=2.0, min_gain=0.25)


@pytest.mark.parametrize(
    ("lanes", "expected"),
    [
        ([LaneBacklog("v", 0, 2, entries_read=10), LaneBacklog("s", 5, 30, entries_read=100)], 78),
        ([LaneBacklog("v", 0, 0, entries_read=0), LaneBacklog("s", None, 3, entries_read=None)], None),
        ([LaneBacklog("v", 0, 9, entries_read=4)], 0),  # never negative
        ([], 0),
    ],
    ids=["read-minus-pending-summed", "unknown-lane", "clamped", "no-lanes"],
)
def test_finished(lanes: list[LaneBacklog], expected: int | None) -> None:
    assert finished(lanes) == expected


@pytest.mark.parametrize(
    ("rates", "min_gain", "expected"),
    [
        ({}, 0.25, None),
        ({1: 266.0}, 0.25, None),
        ({1: 266.0, 2: 391.0}, 0.25, None),  # +125/s, a quarter of the average renderer is 66.5
        ({1: 266.0, 2: 391.0, 3: 395.0}, 0.25, 2),  # the third added 4/s: stop at two
        ({2: 391.0, 3: 380.0}, 0.25, 2),  # it fell
        ({1: 300.0, 2: 310.0}, 0.25, 1),
        ({1: 300.0, 3: 320.0}, 0.25, 2),  # a gap: only the last one added is judged
        ({8: 2400.0, 9: 2650.0}, 0.25, None),  # +10 % is most of what a ninth can bring
        ({8: 2400.0, 9: 2440.0}, 0.25, 8),
        ({1: 300.0, 2: 300.0}, 0.0, None),  # min_gain 0: only a fall stops it
        ({1: 300.0, 2: 290.0}, 0.0, 1),
        ({0: 0.0, 1: 300.0}, 0.25, None),  # no renderers: not a count
    ],
)
def test_plateau(rates: dict[int, float], min_gain: float, expected: int | None) -> None:
    assert plateau(rates, min_gain) == expected


def _tp(live: int, pace: float | None = None, rates: dict[int, float] | None = None, ready: bool = True) -> Throughput:
    return Throughput(live=live, pace=pace, rates=rates or {}, ready=ready)


@pytest.mark.parametrize(
    ("work", "capacity", "throughput", "cfg", "expected", "says"),
    [
        # idle, or a backlog one renderer finishes within burst_s: the drain rule alone
        (0, 650.0, _tp(1), TP, 1, ""),
        (1000, 650.0, _tp(1), TP, 1, ""),
        # a burst on one idle renderer: one more at once (2000 at 650/s is 3.1 s)
        (2000, 650.0, _tp(1), TP, 2, "burst: 3.1s of work at 650/s with 1 live: one more (2)"),
        # unmeasured renderers: the default rate sizes it (10 s of work)
        (2000, 0.0, _tp(1), TP, 2, "one more (2)"),
        # the one added is not measured yet: no third, but the two are held (the drain rule says 1)
        (3000, 650.0, _tp(2, ready=False), TP, 2, "not measured yet"),
        # measured: two make 391/s, 1500 left last 3.8 s: a third
        (1500, 650.0, _tp(2, pace=391.0, rates={2: 391.0}), TP, 3, "one more (3)"),
        # the local backend's cores (its CPU cap) are there to fill: all of them at once
        (2000, 650.0, replace(_tp(1), cores=4), PolicyConfig(1, 8, 20.0, 200.0), 4, "free cores, 4 at once"),
        (2000, 650.0, replace(_tp(1), cores=8), TP, 4, "free cores, 4 at once"),  # but not past max
        # … not past a plateau, and past them one at a time
        (9000, 650.0, replace(_tp(1, rates={1: 300.0, 2: 310.0}), cores=4), PolicyConfig(1, 8, 20.0, 200.0), 1,
         "none added past the plateau"),
        (9000, 650.0, replace(_tp(4, pace=1400.0, rates={4: 1400.0}), cores=4), PolicyConfig(1, 8, 20.0, 200.0), 5,
         "one more (5)"),
        # as many as the cores at the burst's start (warm spares): no more before they are measured
        (9000, 650.0, replace(_tp(2), cores=2), TP, 2, "the cores' count not measured yet"),
        # the renderers have the cores (the local backend's CPU cap): the two are held, no third
        (1500, 650.0, replace(_tp(2, pace=391.0, rates={2: 391.0}), cores_full=True), TP, 2, "the cores are full"),
        # the measured pace, not the capacity, says how long it lasts: 700 at 391/s is 1.8 s
        (700, 650.0, _tp(2, pace=391.0, rates={2: 391.0}), TP, 1, ""),
        # the third did not raise the rate: at most two, whatever the backlog
        (1500, 650.0, _tp(3, pace=395.0, rates={1: 266.0, 2: 391.0, 3: 395.0}), TP, 2, "plateau at 2"),
        (200_000, 100.0, _tp(2, pace=391.0, rates={1: 266.0, 2: 391.0, 3: 395.0}), TP, 2, "at most 2"),
        # but never below min
        (
            1500, 650.0, _tp(3, pace=395.0, rates={1: 266.0, 2: 391.0, 3: 395.0}),
            PolicyConfig(3, 4, 20.0, 200.0), 3, "plateau at 2",
        ),
        # nor above max: the four are held while it lasts
        (5000, 650.0, _tp(4, pace=1200.0, rates={4: 1200.0}), TP, 4, "with 4 live"),
    ],
    ids=[
        "idle", "short", "burst-start", "burst-unmeasured", "wait-for-measure", "next-one", "to-the-cores",
        "to-the-cores-max", "to-the-cores-plateau", "past-the-cores", "at-the-cores-unmeasured", "cores-full",
        "pace-short", "plateau", "plateau-bounds-drain", "plateau-min", "at-max",
    ],
)  # fmt: skip
def test_burst_and_plateau(
    work: int, capacity: float, throughput: Throughput, cfg: PolicyConfig, expected: int, says: str
) -> None:
    rec = recommend([LaneBacklog("s", lag=work, pending=0)], [capacity], current=throughput.live, cfg=cfg,
                    throughput=throughput)  # fmt: skip
    assert rec.replicas == expected, rec.reason
    assert says in rec.reason


SPARE = replace(TP, spare=1)


@pytest.mark.parametrize(
    ("work", "throughput", "cfg", "expected", "says"),
    [
        # idle on 2 cores: min 1 and one spare are live, warm for the next burst
        (0, replace(_tp(1), cores=2), SPARE, 2, "1 spare above min: 2 live"),
        # no CPU cap (0): the spare too
        (0, _tp(1), SPARE, 2, "1 spare above min"),
        # one core: the cap wins, no spare
        (0, replace(_tp(1), cores=1), SPARE, 1, ""),
        # max wins
        (0, replace(_tp(1), cores=8), replace(SPARE, minimum=4), 4, ""),
        # a plateau at 1 wins too: a second renderer did not pay here
        (0, replace(_tp(1, rates={1: 300.0, 2: 310.0}), cores=2), SPARE, 1, "at most 1"),
        # the burst rule may ask for more; the spare adds nothing on top of it
        (9000, replace(_tp(1), cores=4), replace(SPARE, maximum=8), 4, "free cores, 4 at once"),
    ],
    ids=["idle", "no-cap", "one-core", "max", "plateau", "burst"],
)  # fmt: skip
def test_spare(work: int, throughput: Throughput, cfg: PolicyConfig, expected: int, says: str) -> None:
    rec = recommend([LaneBacklog("s", lag=work, pending=0)], [650.0], current=throughput.live, cfg=cfg,
                    throughput=throughput)  # fmt: skip
    assert rec.replicas == expected, rec.reason
    assert says in rec.reason
    # Without the throughput policy (Kubernetes: pods cost), no spare.
    assert recommend([LaneBacklog("s", lag=0, pending=0)], [650.0], current=1, cfg=cfg).replicas == cfg.minimum


def test_drain_policy_ignores_bursts() -> None:
    # Without a Throughput (the drain policy: Kubernetes), a 2000-ticket burst at 650/s stays at one.
    assert recommend([LaneBacklog("s", lag=2000, pending=0)], [650.0], current=1, cfg=TP).replicas == 1


def test_plateau_ceiling_overrides_the_down_window() -> None:
    stab = Stabiliser.from_config(TP)
    busy = recommend([LaneBacklog("s", lag=200_000, pending=0)], [100.0], current=1, cfg=TP)
    assert decide(stab, 0, busy, 1).replicas == 4
    # When three of them turn out to make no more than two did, the ceiling applies at once
    # (the down-window would have kept four for a minute), and says why
    rates = {2: 391.0, 3: 395.0}
    capped = recommend([LaneBacklog("s", lag=150_000, pending=0)], [100.0], current=4, cfg=TP,
                       throughput=_tp(3, pace=395.0, rates=rates))  # fmt: skip
    d = decide(stab, 5, capped, 4)
    assert (d.replicas, d.changed) == (2, True)
    assert d.reason.startswith("scale-down (plateau)") and "plateau at 2" in d.reason


# Each step: (t, finished so far, live renderers, work waiting) then what the view says:
# (pace, measured rates, ready).
MeterStep = tuple[float, int | None, int, bool, float | None, dict[int, float], bool]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [
                (0, 1000, 1, True, None, {}, True),  # a burst starts on one renderer: ready to add
                (1, 1100, 1, True, None, {}, True),
                (3, 1300, 1, True, 100.0, {1: 100.0}, True),  # 3 s measured: 100/s
                (4, 1400, 2, True, None, {1: 100.0}, False),  # a second joined: settling
                (4.5, 1480, 2, True, None, {1: 100.0}, False),
                (5, 1560, 2, True, None, {1: 100.0}, False),  # its stretch starts here
                (8, 2040, 2, True, 160.0, {1: 100.0, 2: 160.0}, True),  # measured: the next may come
            ],
            id="one-then-two",
        ),
        pytest.param(
            [
                (0, 0, 2, True, None, {}, True),
                (3, 600, 2, True, 200.0, {2: 200.0}, True),
                (4, 800, 2, False, None, {2: 200.0}, False),  # drained: no burst, the rate is kept
                (5, 800, 2, True, None, {2: 200.0}, True),  # a new burst on the same two
                (130, 800, 2, False, None, {}, False),  # forgotten after keep_s
            ],
            id="burst-ends-and-ages-out",
        ),
        pytest.param(
            [
                (0, None, 1, True, None, {}, True),  # entries-read unknown: nothing measured
                (4, None, 1, True, None, {}, True),
                (5, 10, 1, True, None, {}, True),
                (6, 5, 1, True, None, {}, True),  # the counter went back (a restart): afresh
                (9, 305, 1, True, 100.0, {1: 100.0}, True),
            ],
            id="unknown-and-reset",
        ),
    ],
)
def test_throughput_meter(steps: list[MeterStep]) -> None:
    meter = ThroughputMeter(window_s=3.0, settle_s=1.0, keep_s=120.0)
    for t, done, live, waiting, pace, rates, ready in steps:
        meter.observe(t, done, live, waiting)
        view = meter.view()
        assert view.pace == pytest.approx(pace), t
        assert dict(view.rates) == pytest.approx(rates), t
        assert view.ready == ready, t


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, True),  # `just up`: the local backend on one host
        ({"scaler_backend": "kubernetes"}, False),  # pods on other nodes add cores: scale on lag
        ({"scaler_backend": "kubernetes", "scaler_policy": "throughput"}, True),
        ({"scaler_policy": "drain"}, False),
    ],
)
def test_the_default_policy_follows_the_backend(env: dict[str, str], expected: bool) -> None:
    assert ScalerSettings.model_validate(env).throughput_policy is expected
