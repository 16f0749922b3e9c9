"""The Temporal runtime that serves docjobs' Prometheus metrics (their names and labels:
docjobs/domain/metric_names.py)."""

from __future__ import annotations

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from docjobs.domain.metric_names import CPU_BUCKETS, DOCUMENT_CPU, STAGE_CPU, STAGE_DURATION, STAGE_DURATION_BUCKETS
from docjobs.settings.config import ConfigError, Settings


def metrics_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime serving Prometheus metrics at `http://DOCJOBS_METRICS_HOST:port/metrics` (None
    without a metrics port); the client and workers connected with it report there."""
    if settings.metrics_port is None:
        return None
    prometheus = PrometheusConfig(
        bind_address=f"{settings.metrics_host}:{settings.metrics_port}",
        histogram_bucket_overrides={
            STAGE_DURATION: STAGE_DURATION_BUCKETS,
            STAGE_CPU: CPU_BUCKETS,
            DOCUMENT_CPU: CPU_BUCKETS,
        },
    )
    try:
        return Runtime(telemetry=TelemetryConfig(metrics=prometheus))
    except ValueError as error:  # the address is taken or malformed
        raise ConfigError(f"--metrics-port / DOCJOBS_METRICS_HOST: {error}") from None
