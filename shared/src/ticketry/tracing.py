"""OpenTelemetry traces that follow one ticket across the services.

Every unit of work has a trace context, exported or not: each HTTP request of
the api (FastAPI opens a server span per request once a provider is set,
continuing an incoming ``traceparent`` or starting a new trace) and each
ticket a renderer renders, so every log line about them carries ``trace_id``
(``ticketry.telemetry``). With no exporter configured, spans only get their
ids: the sampler records nothing of a trace no caller sampled (a few
microseconds a span) and nothing is exported; a caller's sampled flag is
passed on unchanged.

``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``;
the exporter reads the standard ``OTEL_*`` variables, ``OTEL_TRACES_SAMPLER``
too) sends spans over OTLP/HTTP; ``TICKETRY_TRACE_FILE`` appends them to a
file as JSON lines (the tests read it; handy without a collector). Configure
an exporter on every service: one without passes its traces on unsampled.

The context travels with the work, as a W3C ``traceparent``: the api's
``order.place`` span is the parent of each render request it appends, the
renderer's ``ticket.render`` span continues it and its ticket event carries it
on, and the notifier's ``progress.push`` span closes the trace at the buyer's
socket.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_OTLP_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class JsonLinesExporter(SpanExporter):
    """Finished spans as one JSON object per line, appended to ``path``
    (several processes may share the file: each line is one ``write``)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = b"".join(orjson.dumps(_as_dict(s)) + b"\n" for s in spans)
        with self._lock, self._path.open("ab") as fh:
            fh.write(lines)
        return SpanExportResult.SUCCESS


def _as_dict(span: ReadableSpan) -> dict[str, object]:
    ctx = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "trace_id": f"{ctx.trace_id:032x}" if ctx else None,
        "span_id": f"{ctx.span_id:016x}" if ctx else None,
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "attributes": dict(span.attributes or {}),
    }


def _otlp() -> bool:
    """Whether an OTLP endpoint is configured (the standard ``OTEL_*`` variables)."""
    return any(os.environ.get(v) for v in _OTLP_VARS)


def tracer_provider(service: str, trace_file: Path | None = None) -> TracerProvider:
    """The provider for ``service``: exporting to OTLP (when an ``OTEL_*``
    endpoint is set) and/or ``trace_file``, or, with neither, one that gives
    spans their ids and records only what a caller sampled (and exports nothing)."""
    resource = Resource.create({"service.name": f"ticketry-{service}"})
    otlp = _otlp()
    if not (otlp or trace_file):
        return TracerProvider(resource=resource, sampler=ParentBased(ALWAYS_OFF))
    provider = TracerProvider(resource=resource)
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if trace_file:
        trace_file.parent.mkdir(parents=True, exist_ok=True)
        provider.add_span_processor(BatchSpanProcessor(JsonLinesExporter(trace_file)))
    return provider


def setup_tracing(service: str, trace_file: Path | None = None) -> bool:
    """Install :func:`tracer_provider` as the process's; True if spans are exported."""
    provider = tracer_provider(service, trace_file)
    trace.set_tracer_provider(provider)
    return bool(trace_file) or _otlp()


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def current_traceparent() -> str:
    """The current span as a W3C ``traceparent`` ("" outside any span)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent", "")


def context_from(traceparent: str) -> Context | None:
    """The remote parent a message carried (None for none)."""
    return _PROPAGATOR.extract({"traceparent": traceparent}) if traceparent else None
