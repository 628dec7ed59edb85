"""Prometheus metrics of one service instance (own registry, so several apps in one process do not clash)."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

# Step latency buckets: sub-millisecond FIFO steps up to multi-second scene resets.
_STEP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class ServiceMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.sessions = Gauge("unirender_sessions", "open sessions", registry=r)
        self.players = Gauge("unirender_players", "player slots in use (sessions and jobs)", registry=r)
        self.steps = Counter("unirender_steps", "session steps and resets served", ["outcome"], registry=r)
        self.step_seconds = Histogram(
            "unirender_step_seconds", "time in the session backend per step", buckets=_STEP_BUCKETS, registry=r
        )
        self.bytes_out = Counter("unirender_response_bytes", "response body bytes", ["format"], registry=r)
        self.player_restarts = Counter("unirender_player_restarts", "players restarted after a crash", registry=r)
        self.requests = Counter("unirender_http_requests", "API requests", ["route", "status"], registry=r)
        self.jobs = Gauge("unirender_jobs", "jobs by state", ["state"], registry=r)
        self.job_progress = Gauge(
            "unirender_job_progress_ratio", "fraction of a running job done", ["job"], registry=r
        )
        self.reaped = Counter("unirender_sessions_reaped", "idle sessions stopped by the reaper", registry=r)
        # A restart's toll, counted once at start (docs/service.md, "Restarts"): what the previous service left.
        self.sessions_lost = Counter("unirender_sessions_lost_in_restart", "sessions the previous service left "
                                     "live (their players died with it), listed as lost", registry=r)
        self.jobs_taken_up = Counter("unirender_jobs_taken_up", "jobs the previous service left queued or running, "
                                     "queued again to resume", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
