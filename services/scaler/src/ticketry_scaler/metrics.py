"""Prometheus metrics of the scaler (``/metrics`` on ``TICKETRY_SCALER_METRICS_PORT``).

One scrape target carries three kinds of series (docs/contract.md "Metrics"):

* **this instance's own** view (``ticketry_scaler_*``): what it decided, its
  backend's replicas, whether it leads. Every instance exports them; summing
  them over instances means nothing.
* **cluster-wide gauges**, exported by the leader only (:class:`ClusterGauges`):
  ``ticketry_stream_lag`` / ``ticketry_stream_pending`` {stream, group} of the
  render lanes and of the projector, ``ticketry_dead_letters`` and
  ``ticketry_renderers`` {state = desired | running}. A standby exports none of
  them, so ``sum by (stream)`` over every scaler counts each stream once.
* **its local renderers' series** (``ticketry_tickets_rendered_total``…, see
  ``ticketry_renderer.metrics``). Renderers are forked processes that come and
  go, so they serve no port: :func:`renderers_dir` makes a directory of this
  scaler's own and sets ``PROMETHEUS_MULTIPROC_DIR`` to it for its children
  before the first one starts; ``prometheus_client`` in each renderer then
  keeps its values in files there (``counter_<pid>.db``…), and
  :class:`RenderersCollector` sums the files at each scrape. A renderer that
  exited still counts (its files are folded into an archive file), so the sums
  only ever rise while this scaler lives; the directory goes with the scaler, and Prometheus reads the
  new scaler's counters starting at 0 as a counter reset.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from redis.asyncio import Redis
from ticketry import streams
from ticketry.runtime import METRICS_DIR_ENV

from ticketry_scaler import observe
from ticketry_scaler.policy import LaneBacklog, lane_lag

log = logging.getLogger(__name__)

DESIRED = Gauge("ticketry_scaler_replicas_desired", "Renderer replicas the scaler decided on")
TARGET = Gauge("ticketry_scaler_replicas_target", "Renderer replicas the backend is set to")
RUNNING = Gauge("ticketry_scaler_replicas_running", "Renderer replicas the backend reports up")
LIVE = Gauge("ticketry_scaler_renderers_live", "Renderers with a live heartbeat (every host, any owner)")
# This instance's view of the render lanes; the cluster-wide, leader-only gauges are ticketry_stream_*.
LAG = Gauge("ticketry_scaler_lag_entries", "Undelivered render requests (this view)", ["stream"])
PENDING = Gauge("ticketry_scaler_pending_entries", "Delivered, unacked render requests (this view)", ["stream"])
RATE = Gauge("ticketry_scaler_rate_per_renderer", "Tickets/s per renderer the policy used")
DRAIN = Gauge("ticketry_scaler_drain_estimate_seconds", "Backlog ÷ (running × rate): time to drain as is")
LEADER = Gauge("ticketry_scaler_leader", "1 while this instance holds the scaler lock")
DECISIONS = Counter("ticketry_scaler_decisions", "Replica changes decided", ["direction"])
RESTARTS = Counter("ticketry_scaler_renderer_restarts", "Renderer processes restarted after exiting")


@dataclass(frozen=True, slots=True)
class StreamBacklog:
    stream: str
    group: str
    lag: int
    pending: int


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What the leader saw of the whole cluster in one round."""

    streams: tuple[StreamBacklog, ...]
    dead_letters: int
    desired: int
    running: int


def _backlog(lane: LaneBacklog, group: str) -> StreamBacklog:
    return StreamBacklog(lane.stream, group, lane_lag(lane), max(0, lane.pending))


async def observe_cluster(redis: Redis, *, scan_cap: int = 10_000) -> ClusterSnapshot:
    """One round of the cluster-wide gauges: each render lane (group
    ``renderers``) and the ticket events (group ``projector``), the dead
    letters, live renderers (heartbeats, every host) and the replicas this
    scaler decided on."""
    lanes = [
        _backlog(lane, streams.RENDERERS_GROUP)
        for lane in await observe.backlogs(redis, streams.RENDER_LANES, streams.RENDERERS_GROUP, scan_cap=scan_cap)
    ]
    projector = await observe.lane_backlog(redis, streams.TICKET_EVENTS, streams.PROJECTOR_GROUP, scan_cap=scan_cap)
    dead = int(await redis.xlen(streams.DEAD_LETTERS))
    live = len(await observe.heartbeats(redis))
    return ClusterSnapshot(
        streams=(*lanes, _backlog(projector, streams.PROJECTOR_GROUP)),
        dead_letters=dead,
        desired=int(_value(DESIRED)),
        running=live,
    )


def _value(gauge: Gauge) -> float:
    for family in gauge.collect():
        for sample in family.samples:
            return float(sample.value)
    return 0.0


class ClusterGauges:
    """The cluster-wide gauges: the last snapshot while this instance leads,
    nothing at all otherwise (:meth:`hide`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: ClusterSnapshot | None = None

    def show(self, snapshot: ClusterSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def hide(self) -> None:
        with self._lock:
            self._snapshot = None

    def describe(self) -> Iterable[Metric]:
        return []  # names vary with leadership; nothing to reserve

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap = self._snapshot
        if snap is None:
            return
        lag = GaugeMetricFamily(
            "ticketry_stream_lag", "Entries of a stream not yet delivered to its group", labels=["stream", "group"]
        )
        pending = GaugeMetricFamily(
            "ticketry_stream_pending", "Entries delivered to a group and not acknowledged", labels=["stream", "group"]
        )
        for s in snap.streams:
            lag.add_metric([s.stream, s.group], s.lag)
            pending.add_metric([s.stream, s.group], s.pending)
        yield lag
        yield pending
        yield GaugeMetricFamily(
            "ticketry_dead_letters", "Render requests in the dead-letter stream", value=snap.dead_letters
        )
        renderers = GaugeMetricFamily("ticketry_renderers", "Renderers desired and running", labels=["state"])
        renderers.add_metric(["desired"], snap.desired)
        renderers.add_metric(["running"], snap.running)
        yield renderers


CLUSTER = ClusterGauges()
REGISTRY.register(CLUSTER)


class RenderersCollector:
    """The local renderers' series: the sum of their files in ``path``
    (``prometheus_client`` multiprocess mode). Files of this process are left
    out: they are already in the default registry (a scaler started with
    ``PROMETHEUS_MULTIPROC_DIR`` set runs in multiprocess mode itself).

    Each renderer that ever ran leaves its files, and a scrape reads them all,
    so before each scrape the files of renderers that exited are folded into
    one archive file per type (counters and histograms hold plain sums per
    key, so adding their values is exact) and removed, under the lock every
    scrape takes: no scrape sees a value twice or not at all."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            try:
                self.compact()
            except OSError as exc:  # never fail the scrape for it
                log.warning("renderer metrics: compaction failed", extra={"error": repr(exc)})
            own = f"_{os.getpid()}.db"
            files = [f for f in glob.glob(os.path.join(self._path, "*.db")) if not f.endswith(own)]
            merged: Iterable[Metric] = MultiProcessCollector.merge(files, accumulate=True)  # type: ignore[no-untyped-call]
            return merged

    def compact(self) -> int:
        """Fold the counter and histogram files of exited processes into
        ``<type>_archive.db`` and drop their gauge files (a gauge of a process
        that is gone says nothing); returns how many files went."""
        folded = 0
        for f in glob.glob(os.path.join(self._path, "gauge_*.db")):
            if _exited(f):
                os.remove(f)
                folded += 1
        for typ in ("counter", "histogram"):
            dead = [f for f in glob.glob(os.path.join(self._path, f"{typ}_*.db")) if _exited(f)]
            if not dead:
                continue
            totals: dict[str, float] = {}
            for f in dead:
                for key, value, _ts, _pos in MmapedDict.read_all_values_from_file(f):  # type: ignore[no-untyped-call]
                    totals[key] = totals.get(key, 0.0) + value
            archive = MmapedDict(os.path.join(self._path, f"{typ}_archive.db"))  # type: ignore[no-untyped-call]
            try:
                for key, add in totals.items():
                    value, _ = archive.read_value(key)  # type: ignore[no-untyped-call]
                    archive.write_value(key, value + add, 0.0)  # type: ignore[no-untyped-call]
            finally:
                archive.close()  # type: ignore[no-untyped-call]
            for f in dead:
                os.remove(f)
            folded += len(dead)
        return folded


def _exited(path: str) -> bool:
    """Whether the process that wrote ``<type>_<pid>.db`` has exited."""
    pid_text = os.path.basename(path)[:-3].rpartition("_")[2]
    if not pid_text.isdigit() or int(pid_text) == os.getpid():
        return False  # the archive, or ours
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's (a reused pid)
        return False
    return False


class _Union:
    """Every family of the first source, then the families of the next ones
    that no earlier source had. The renderers' directory also holds zero-valued
    files of the scaler's own metrics: the fork server imports the scaler's
    main module (``multiprocessing`` does) with the directory already set."""

    def __init__(self, *sources: CollectorRegistry | RenderersCollector) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        seen: set[str] = set()
        for source in self._sources:
            for metric in source.collect():
                if metric.name not in seen:
                    seen.add(metric.name)
                    yield metric


def renderers_dir() -> Path:
    """A fresh directory for this scaler's renderers' metric files, set as
    ``PROMETHEUS_MULTIPROC_DIR`` in this process's environment so every
    renderer it starts (forked from its fork server or exec'd) inherits it.
    Call before the backend is built. This process's own metrics stay in
    memory: ``prometheus_client`` chose that when it was imported."""
    path = Path(tempfile.mkdtemp(prefix="ticketry-renderer-metrics-"))
    os.environ[METRICS_DIR_ENV] = str(path)
    return path


def remove_renderers_dir(path: Path) -> None:
    if os.environ.get(METRICS_DIR_ENV) == str(path):
        del os.environ[METRICS_DIR_ENV]
    shutil.rmtree(path, ignore_errors=True)


def serve(port: int, host: str, renderers: Path | None) -> WSGIServer:
    """``/metrics``: this process's registry plus, with ``renderers``, the
    local renderers' files."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Union(REGISTRY, *([RenderersCollector(renderers)] if renderers else [])))
    server, _ = start_http_server(port, host, registry=registry)
    return server
