"""PDF inspection and watermarking, free of any Temporal dependency so it can be tested alone."""

from docjobs.pdf.inspect import Encryption, PdfInfo, ProgressFn, inspect_pdf, sniff_kind
from docjobs.pdf.raster import watermark_box, watermark_raster
from docjobs.pdf.watermark import encode_text, watermark_structure

__all__ = [
    "Encryption",
    "PdfInfo",
    "ProgressFn",
    "encode_text",
    "inspect_pdf",
    "sniff_kind",
    "watermark_box",
    "watermark_raster",
    "watermark_structure",
]
