"""docjobs' Prometheus metrics: their names and their labels (docjobs/temporal/metrics.py serves them).

A worker started with `--metrics-port` serves one endpoint with the Temporal SDK's runtime metrics
(`temporal_*`) and docjobs' own (`docjobs_*`), which are recorded through the SDK's metric meters.
Labels are low-cardinality by construction: states, stages, policy names, failure families, check names,
watermark modes, page-count buckets. Never a job ID, a tenant's document name, a digest or a file name.
"""

from __future__ import annotations

from docjobs.domain.models import JobShape

# The exported names (the SDK's exporter adds no `_total` suffix to counters; histograms get the usual
# `_bucket`, `_sum` and `_count` series).
JOBS_TERMINAL = "docjobs_jobs_terminal"
STAGE_DURATION = "docjobs_stage_duration_seconds"
ACTIVITY_ATTEMPTS = "docjobs_activity_attempts"
LEASE_EXPIRATIONS = "docjobs_lease_expirations"
FIDELITY_FAILURES = "docjobs_fidelity_failures"
OLDEST_ACTIVE_JOB_AGE = "docjobs_oldest_active_job_age_seconds"
ACTIVE_JOBS = "docjobs_active_jobs"
STAGE_CPU = "docjobs_stage_cpu_seconds"
DOCUMENT_CPU = "docjobs_document_cpu_seconds"
RELEASED_PAGES = "docjobs_released_pages"

# Stage attempts last from a fraction of a second (publish) to half an hour (OCR of a long scan).
STAGE_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
# CPU seconds of one stage attempt, and of a whole document (every stage attempt of a job).
CPU_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
PAGE_BUCKETS = ((1, "1"), (10, "2-10"), (50, "11-50"), (200, "51-200"))
UNKNOWN = "unknown"


def page_bucket(pages: int) -> str:
    if pages < 1:
        return UNKNOWN
    for top, name in PAGE_BUCKETS:
        if pages <= top:
            return name
    return f"{PAGE_BUCKETS[-1][0] + 1}+"


def shape_labels(shape: JobShape | None) -> dict[str, str]:
    """The `watermark_mode` and `page_bucket` labels of a stage's duration."""
    if shape is None:
        return {"watermark_mode": UNKNOWN, "page_bucket": UNKNOWN}
    mode = shape.watermark_mode.value if shape.watermark_mode else UNKNOWN
    return {"watermark_mode": mode, "page_bucket": page_bucket(shape.page_count)}


def failure_family(code: str | None) -> str:
    """`fidelity` for `fidelity.page_count`, `none` without a failure: the code's stable prefix."""
    return code.split(".", 1)[0] if code else "none"
