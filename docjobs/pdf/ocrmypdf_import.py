"""OCRmyPDF's modules, imported once by the document zygote, without OCRmyPDF's changes to pdfminer.

OCRmyPDF runs in a fork of the document child (docjobs/pdf/ocr_process.py), and the zygote imports its modules ahead so
that no call pays for them. But importing OCRmyPDF changes pdfminer for the whole process: `ocrmypdf.pdfinfo.layout`
replaces `PDFSimpleFont.__init__`, so that a simple font with neither /ToUnicode nor /Encoding (a standard-14
font used as is) maps no code to text. The redaction engine locates matches with pdfminer; in a child patched so,
it found no text in such fonts while pdftotext and pypdf read it, and every such redaction was quarantined
(`redaction.leak`: the gate found the value that nothing had removed).

So the import is made here (importing this module makes it: `stage_work.PRELOAD_FOR` names it for the OCR queue's
zygotes; the general queue's never import OCRmyPDF), and
whatever it replaced in pdfminer's classes and modules is put back for the child; `use_ocrmypdf_patches` puts
OCRmyPDF's versions back in the fork that runs it, which then reads as plain OCRmyPDF.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pdfminer.high_level  # noqa: F401 - imports the pdfminer modules OCRmyPDF patches, before it does

# What OCRmyPDF's command line imports, then its run: the zygote imports them all (tests/test_ocr_core.py fails
# when a call imports one more).
OCRMYPDF_MODULES = (
    "ocrmypdf.__main__",
    "ocrmypdf._validation_coordinator",
    "ocrmypdf.builtin_plugins.concurrency",
    "ocrmypdf.builtin_plugins.default_filters",
    "ocrmypdf.builtin_plugins.ghostscript",
    "ocrmypdf.builtin_plugins.null_ocr",
    "ocrmypdf.builtin_plugins.optimize",
    "ocrmypdf.builtin_plugins.pypdfium",
    "ocrmypdf.builtin_plugins.tesseract_ocr",
    "ocrmypdf.fpdf_renderer",
    "ocrmypdf.optimize",
)

Attribute = tuple[object, str]  # (a pdfminer module or class, the name of an attribute of it)
_pristine: dict[Attribute, object] = {}
_ocrmypdf: dict[Attribute, object] = {}


def _import_ocrmypdf() -> None:
    """Import OCRMYPDF_MODULES with pdfminer left as it was, recording what the import changed in it."""
    before = _pdfminer_attributes()
    for name in OCRMYPDF_MODULES:
        importlib.import_module(name)
    for key, value in _pdfminer_attributes().items():
        if key in before and before[key] is not value:
            _pristine.setdefault(key, before[key])
            _ocrmypdf[key] = value
    _set(_pristine)


def use_ocrmypdf_patches() -> None:
    """Put OCRmyPDF's changes to pdfminer back (recorded when this module was imported): in the fork that runs
    OCRmyPDF, never in the document child."""
    _set(_ocrmypdf)


def _set(values: dict[Attribute, object]) -> None:
    for (owner, name), value in values.items():
        setattr(owner, name, value)


def _pdfminer_attributes() -> dict[Attribute, object]:
    """Every attribute of pdfminer's loaded modules and of the classes they define."""
    found: dict[Attribute, object] = {}
    modules = [m for name, m in list(sys.modules.items()) if name.partition(".")[0] == "pdfminer"]
    for module in modules:
        if not isinstance(module, ModuleType):
            continue
        for name, value in list(vars(module).items()):
            found[(module, name)] = value
            if isinstance(value, type) and value.__module__ == module.__name__:
                found.update(((value, attribute), member) for attribute, member in list(vars(value).items()))
    return found


_import_ocrmypdf()
