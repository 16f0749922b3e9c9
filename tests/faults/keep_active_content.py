"""DOCJOBS_FAULT=keep-active-content: render strips nothing (the verify gate must find the active content)."""

from __future__ import annotations

from pathlib import Path

from docjobs.domain.policy import SanitizePolicy
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import ENTRIES


def sanitize_nothing(path: Path, policy: SanitizePolicy) -> dict[str, int]:
    return {}


setattr(stage_work, "sanitize_file", sanitize_nothing)  # noqa: B010

__all__ = ["ENTRIES"]
