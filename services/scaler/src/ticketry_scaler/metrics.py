"""Prometheus metrics of the scaler (``/metrics`` on ``TICKETRY_SCALER_METRICS_PORT``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

DESIRED = Gauge("ticketry_scaler_replicas_desired", "Renderer replicas the scaler decided on")
TARGET = Gauge("ticketry_scaler_replicas_target", "Renderer replicas the backend is set to")
RUNNING = Gauge("ticketry_scaler_replicas_running", "Renderer replicas the backend reports up")
LIVE = Gauge("ticketry_scaler_renderers_live", "Renderers with a live heartbeat (every host, any owner)")
LAG = Gauge("ticketry_scaler_lag_entries", "Undelivered render requests", ["stream"])
PENDING = Gauge("ticketry_scaler_pending_entries", "Delivered, unacked render requests", ["stream"])
RATE = Gauge("ticketry_scaler_rate_per_renderer", "Tickets/s per renderer the policy used")
DRAIN = Gauge("ticketry_scaler_drain_estimate_seconds", "Backlog ÷ (running × rate): time to drain as is")
LEADER = Gauge("ticketry_scaler_leader", "1 while this instance holds the scaler lock")
DECISIONS = Counter("ticketry_scaler_decisions", "Replica changes decided", ["direction"])
RESTARTS = Counter("ticketry_scaler_renderer_restarts", "Renderer processes restarted after exiting")
