"""The watermark a policy asks for, in its mode: one entry point for every stage that stamps."""

from __future__ import annotations

from pathlib import Path

from docjobs.domain.policy import WatermarkMode, WatermarkPolicy
from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets
from docjobs.pdf.inspect import PdfInfo, ProgressFn
from docjobs.pdf.raster import watermark_raster
from docjobs.pdf.watermark import watermark_structure


def stamp(
    src: Path,
    dst: Path,
    watermark: WatermarkPolicy,
    *,
    workdir: Path,
    on_page: ProgressFn | None = None,
    budgets: Budgets = DEFAULT_BUDGETS,
) -> PdfInfo:
    """Stamp `src` into `dst` (already validated: streams are not checked again); returns the input's info."""
    opacity = watermark.opacity
    if watermark.mode is WatermarkMode.STRUCTURE:
        return watermark_structure(
            src, dst, watermark.text, opacity=opacity, on_page=on_page, check_streams=False, budgets=budgets
        )
    return watermark_raster(
        src, dst, watermark.text, dpi=watermark.dpi, opacity=opacity, on_page=on_page, workdir=workdir, budgets=budgets
    )
