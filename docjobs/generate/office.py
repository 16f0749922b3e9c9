"""Office documents (Word, Excel, PowerPoint, OpenDocument, RTF) made into PDF by LibreOffice, in the document child.

Acceptance only sniffed the first bytes (docjobs/pdf/inspect.py); here, inside the render stage's child, the format
is decided from the package itself: an OOXML package's main content type (`[Content_Types].xml`), an
OpenDocument's `mimetype` entry, the stream names of an OLE2 compound file's directory, or RTF's magic. Nothing
is taken from a file name. A macro-enabled OOXML package (a `macroEnabled` content type, or a VBA project
part) is refused with `input.active_content` before LibreOffice starts, unless the policy allows it.

Every conversion runs LibreOffice (`soffice.bin --headless --convert-to pdf`) as a tool of the child, so under
all of the child's limits and its sandbox (no network, Landlock: only the attempt folder writable), in a session
of its own that is killed as a whole at the policy's time limit (`input.too_complex`). Its user profile is made
fresh in the attempt folder for each conversion, preset so that no macro runs and no link is updated
(`_PROFILE_SETTINGS`). What LibreOffice prints is never kept: it can quote the document. Only an outcome becomes
a code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import zipfile
from enum import StrEnum
from pathlib import Path

import pikepdf

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.policy import OfficePolicy, PdfVariant


class OfficeFormat(StrEnum):
    DOCX = "docx"
    DOCM = "docm"
    XLSX = "xlsx"
    XLSM = "xlsm"
    PPTX = "pptx"
    PPTM = "pptm"
    DOC = "doc"
    XLS = "xls"
    PPT = "ppt"
    ODT = "odt"
    ODS = "ods"
    ODP = "odp"
    RTF = "rtf"


MACRO_FORMATS = frozenset({OfficeFormat.DOCM, OfficeFormat.XLSM, OfficeFormat.PPTM})

# An OOXML package's main part, by its content type (ECMA-376 part 1, and Microsoft's macro-enabled variants).
_OOXML_MAIN_TYPES = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml": OfficeFormat.DOCX,
    "application/vnd.ms-word.document.macroEnabled.main+xml": OfficeFormat.DOCM,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml": OfficeFormat.XLSX,
    "application/vnd.ms-excel.sheet.macroEnabled.main+xml": OfficeFormat.XLSM,
    "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml": OfficeFormat.PPTX,
    "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml": OfficeFormat.PPTM,
}
_VBA_PROJECT_TYPE = "application/vnd.ms-office.vbaProject"  # a macro project in any package: macro-enabled
_WITH_MACROS = {OfficeFormat.DOCX: OfficeFormat.DOCM, OfficeFormat.XLSX: OfficeFormat.XLSM}
_WITH_MACROS[OfficeFormat.PPTX] = OfficeFormat.PPTM
_ODF_TYPES = {
    b"application/vnd.oasis.opendocument.text": OfficeFormat.ODT,
    b"application/vnd.oasis.opendocument.spreadsheet": OfficeFormat.ODS,
    b"application/vnd.oasis.opendocument.presentation": OfficeFormat.ODP,
}
# The stream that holds an OLE2 file's document (MS-DOC, MS-XLS: `Workbook`, or `Book` before Excel 97, MS-PPT).
_OLE2_STREAMS = {"WordDocument": OfficeFormat.DOC, "Workbook": OfficeFormat.XLS, "Book": OfficeFormat.XLS}
_OLE2_STREAMS["PowerPoint Document"] = OfficeFormat.PPT
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_OLE2_LAST_SECTOR = 0xFFFFFFFA  # sector numbers from here on are markers (end of chain, free, FAT, DIFAT)
_CONTENT_TYPES_MAX = 1 << 20  # a package's [Content_Types].xml is a few KiB: more is not read
_CONTENT_TYPE = re.compile(rb'ContentType\s*=\s*"([^"]{1,200})"')

_REGISTRY_NAMESPACE = "http://openoffice.org/2001/registry"
# The user profile's settings (registrymodifications.xcu), keys from LibreOffice's configuration schema
# (officecfg/registry/schema/org/openoffice/Office/*.xcs; as installed: /etc/libreoffice/registry/main.xcd):
# - Common.xcs Security/Scripting MacroSecurityLevel: 3 is "very high", only macros from trusted locations run,
#   and the fresh profile lists none (SecureURL empty);
# - Common.xcs Security/Scripting DisableMacrosExecution: no macro runs at all, whatever the level says;
# - Common.xcs Security/Scripting BlockUntrustedRefererLinks: a document outside the trusted locations (every
#   one here) loads no linked image or object from another place;
# - Writer.xcs Content/Update/Link: 0, never update links (css.document.LinkUpdateModes NEVER);
# - Calc.xcs Content/Update/Link: 1, never (ScLkUpdMode LM_NEVER; 0 is always, 2 on request).
_PROFILE_SETTINGS = (
    ("org.openoffice.Office.Common/Security/Scripting", "MacroSecurityLevel", "3"),
    ("org.openoffice.Office.Common/Security/Scripting", "DisableMacrosExecution", "true"),
    ("org.openoffice.Office.Common/Security/Scripting", "SecureURL", ""),
    ("org.openoffice.Office.Common/Security/Scripting", "BlockUntrustedRefererLinks", "true"),
    ("org.openoffice.Office.Writer/Content/Update", "Link", "0"),
    ("org.openoffice.Office.Calc/Content/Update", "Link", "1"),
)
# LibreOffice's PDF export filter of each kind of document (filter/source/config/fragments/filters/*_pdf_Export.xcu).
_PDF_FILTERS = dict.fromkeys(
    (OfficeFormat.DOCX, OfficeFormat.DOCM, OfficeFormat.DOC, OfficeFormat.ODT, OfficeFormat.RTF), "writer_pdf_Export"
)
_PDF_FILTERS.update(
    dict.fromkeys((OfficeFormat.XLSX, OfficeFormat.XLSM, OfficeFormat.XLS, OfficeFormat.ODS), "calc_pdf_Export")
)
_PDF_FILTERS.update(
    dict.fromkeys((OfficeFormat.PPTX, OfficeFormat.PPTM, OfficeFormat.PPT, OfficeFormat.ODP), "impress_pdf_Export")
)
# The PDF export filter's options for each variant a policy may ask (vcl/source/filter/ipdf's PDFWriter versions, as
# the filter's `SelectPdfVersion` takes them: 2 is PDF/A-2b, 3 PDF/A-3b; PDF/UA is tagged PDF with a flag of its own).
_VARIANT_OPTIONS: dict[PdfVariant, dict[str, dict[str, object]]] = {
    PdfVariant.PDF_A_2B: {"SelectPdfVersion": {"type": "long", "value": "2"}},
    PdfVariant.PDF_A_3B: {"SelectPdfVersion": {"type": "long", "value": "3"}},
    PdfVariant.PDF_UA_1: {
        "PDFUACompliance": {"type": "boolean", "value": "true"},
        "UseTaggedPDF": {"type": "boolean", "value": "true"},
    },
}
SOFFICE_ARGUMENTS = ("--headless", "--norestore", "--nolockcheck", "--nodefault", "--nofirststartwizard")
_KILL_GRACE_SECONDS = 2.0
_RESTART = 81  # soffice.bin's "restart me" (E_RESTART in desktop/source/app), after it set a fresh profile up


def office_format(path: Path) -> OfficeFormat:
    """What office document `path` is, from its package (see the module docstring); `input.unsupported` if it is
    none of the accepted formats, `input.malformed` if its package cannot be read."""
    with path.open("rb") as file:
        head = file.read(len(_OLE2_MAGIC))
    if head.startswith(b"{\\rtf"):
        return OfficeFormat.RTF
    if head == _OLE2_MAGIC:
        return _ole2_format(path)
    try:
        with zipfile.ZipFile(path) as package:
            names = set(package.namelist())
            if "mimetype" in names:
                with package.open("mimetype") as entry:
                    found = _ODF_TYPES.get(entry.read(100).strip())
            elif "[Content_Types].xml" in names:
                with package.open("[Content_Types].xml") as entry:
                    found = _ooxml_format(entry.read(_CONTENT_TYPES_MAX))
            else:
                found = None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the office document's package cannot be read") from None
    if found is None:
        raise DocJobError(
            FailureCode.INPUT_UNSUPPORTED, "the package is not a Word, Excel, PowerPoint or OpenDocument file"
        )
    return found


def _ooxml_format(content_types: bytes) -> OfficeFormat | None:
    types = [match.decode("ascii", "replace") for match in _CONTENT_TYPE.findall(content_types)]
    found = next((_OOXML_MAIN_TYPES[name] for name in types if name in _OOXML_MAIN_TYPES), None)
    if found is not None and _VBA_PROJECT_TYPE in types:
        return _WITH_MACROS.get(found, found)
    return found


def _ole2_format(path: Path) -> OfficeFormat:
    """An OLE2 compound file's format, from the names in its directory (MS-CFB): the header's sector size, its
    first 109 FAT sectors (what a document below 7 MiB of FAT needs), and the directory's chain of sectors."""
    data = path.read_bytes()
    names: set[str] = set()
    try:
        size = 1 << struct.unpack_from("<H", data, 0x1E)[0]
        if size not in (512, 4096):
            raise ValueError("sector size")
        directory = struct.unpack_from("<I", data, 0x30)[0]
        fat: list[int] = []
        for sector in struct.unpack_from("<109I", data, 0x4C):
            if sector < _OLE2_LAST_SECTOR:
                fat += struct.unpack_from(f"<{size // 4}I", data, (sector + 1) * size)
        seen: set[int] = set()
        while directory < _OLE2_LAST_SECTOR and directory not in seen and directory < len(fat):
            seen.add(directory)
            start = (directory + 1) * size
            for entry in range(start, min(start + size, len(data)) - 127, 128):
                length = struct.unpack_from("<H", data, entry + 64)[0]
                if 2 <= length <= 64 and data[entry + 66] == 2:  # a stream (1: a storage, 5: the root)
                    names.add(data[entry : entry + length - 2].decode("utf-16-le", "replace"))
            directory = fat[directory]
    except (struct.error, ValueError):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the office document's compound file cannot be read") from None
    found = next((_OLE2_STREAMS[name] for name in sorted(names) if name in _OLE2_STREAMS), None)
    if found is None:
        raise DocJobError(
            FailureCode.INPUT_UNSUPPORTED, "the compound file is not a Word, Excel or PowerPoint document"
        )
    return found


def check_office_input(path: Path, policy: OfficePolicy) -> OfficeFormat:
    """The format of office document `path`, if the policy takes it: `input.unsupported` when the policy takes no
    office documents, `input.active_content` for a macro-enabled format it does not allow."""
    if not policy.enabled:
        raise DocJobError(FailureCode.INPUT_UNSUPPORTED, "the policy takes no office documents")
    found = office_format(path)
    if found in MACRO_FORMATS and not policy.allow_macro_formats:
        raise DocJobError(
            FailureCode.INPUT_ACTIVE_CONTENT, f"a macro-enabled document ({found.value}) is refused by the policy"
        )
    return found


def write_profile(profile: Path) -> None:
    """A fresh LibreOffice user profile at `profile`, with `_PROFILE_SETTINGS` only."""
    (profile / "user").mkdir(parents=True)
    items = "".join(
        f'<item oor:path="/{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>\n'
        for path, name, value in _PROFILE_SETTINGS
    )
    (profile / "user" / "registrymodifications.xcu").write_text(
        f'<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="{_REGISTRY_NAMESPACE}">\n{items}</oor:items>\n'
    )


def export_filter(found: OfficeFormat, max_pages: int, variant: PdfVariant | None = None) -> str:
    """`--convert-to`'s argument: the PDF export filter of `found`'s kind, with its options as JSON."""
    options: dict[str, dict[str, object]] = {"PageRange": {"type": "string", "value": f"1-{max_pages + 1}"}}
    options.update(_VARIANT_OPTIONS[variant] if variant else {})
    return f"pdf:{_PDF_FILTERS[found]}:{json.dumps(options, separators=(',', ':'))}"


def convert_to_pdf(
    source: Path,
    found: OfficeFormat,
    output: Path,
    workdir: Path,
    *,
    seconds: float,
    max_pages: int,
    variant: PdfVariant | None = None,
) -> None:
    """LibreOffice's PDF of office document `source` (of format `found`) at `output`, made in `workdir` (the profile,
    a temporary folder and LibreOffice's output: the attempt's folder) within `seconds` of wall-clock time; as
    `variant` (PDF/A or PDF/UA) when a policy asks it.

    Only pages 1 to `max_pages` + 1 are exported (the filter's `PageRange`): a document over the page limit still
    shows it, and a million rows cost their layout, not a million pages of PDF (13 s instead of over 120 s).

    `soffice.bin` is run itself, not through the `soffice` launcher: the launcher (oosplash) puts LibreOffice's pipe
    in /tmp or /var/tmp and nowhere else, and the child may write neither, whereas soffice.bin takes the folder
    OSL_SOCKET_PATH names when /tmp is not writable (it runs in the attempt's `office/tmp`). On a fresh profile
    soffice.bin first sets the profile up and asks to be restarted (exit status 81), as the launcher would do: it
    is started once more.

    Raises DocJobError: input.too_complex (the time limit, or a limit of the child ended LibreOffice),
    input.malformed (it made no PDF), tool.missing."""
    program = _soffice_bin()
    office = workdir / "office"
    profile, outdir, tmp = office / "lo-profile", office / "out", office / "tmp"
    for folder in (outdir, tmp):
        folder.mkdir(parents=True)
    write_profile(profile)
    document = office / f"document.{found.value}"  # the format decided above: LibreOffice's filter follows it
    shutil.copyfile(source, document)
    command = [
        str(program),
        *SOFFICE_ARGUMENTS,
        f"-env:UserInstallation={profile.as_uri()}",
        "--convert-to",
        export_filter(found, max_pages, variant),
        "--outdir",
        str(outdir),
        str(document),
    ]
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(office), "TMPDIR": str(tmp)}
    # The pipe's path is relative to the folder LibreOffice runs in: an attempt folder's absolute path, with the
    # pipe's name, would not fit in a socket address (108 bytes).
    environment.update(LANG="C.UTF-8", OSL_SOCKET_PATH=".")
    deadline = time.monotonic() + seconds
    status = _RESTART
    while status == _RESTART:
        status = _run(command, environment, tmp, deadline - time.monotonic(), seconds)
    shutil.move(_converted(outdir / "document.pdf", status), output)


def _soffice_bin() -> Path:
    """LibreOffice's own program, beside the `soffice` launcher's real path (tool.missing without it)."""
    launcher = shutil.which("soffice")
    program = Path(os.path.realpath(launcher)).parent / "soffice.bin" if launcher else None
    if program is None or not program.is_file():
        raise DocJobError(FailureCode.TOOL_MISSING, "soffice (libreoffice-*-nogui) is not installed")
    return program


def _converted(converted: Path, status: int) -> Path:
    """The PDF LibreOffice made, if it ended well: a signal is a limit of the child (CPU, memory, file size) or a
    crash (input.too_complex); any other failure, or no PDF, input.malformed."""
    if status < 0:
        raise DocJobError(FailureCode.INPUT_TOO_COMPLEX, f"the converter was ended by signal {-status}")
    if status != 0 or not converted.is_file() or converted.stat().st_size == 0:
        raise DocJobError(
            FailureCode.INPUT_MALFORMED, f"the office document could not be converted (exit status {status})"
        )
    return converted


# Where each format names the fonts it asks for: (parts of its package, or None for the file itself; the pattern of
# a font's family name in them). Binary formats (.doc, .xls, .ppt) are not read: their fonts are not counted.
_FONT_DECLARATIONS: tuple[tuple[tuple[OfficeFormat, ...], tuple[str, ...] | None, re.Pattern[bytes]], ...] = (
    ((OfficeFormat.DOCX, OfficeFormat.DOCM), ("word/fontTable.xml",), re.compile(rb'<w:font w:name="([^"]{1,100})"')),
    ((OfficeFormat.XLSX, OfficeFormat.XLSM), ("xl/styles.xml",), re.compile(rb'<(?:\w+:)?name val="([^"]{1,100})"')),
    ((OfficeFormat.PPTX, OfficeFormat.PPTM), ("ppt/theme/theme1.xml",), re.compile(rb'typeface="([^"+][^"]{0,99})"')),
    (
        (OfficeFormat.ODT, OfficeFormat.ODS, OfficeFormat.ODP),
        ("content.xml", "styles.xml"),
        re.compile(rb'svg:font-family="([^"]{1,100})"'),
    ),
    ((OfficeFormat.RTF,), None, re.compile(rb"\{\\f\d+(?:\\[a-z]+-?\d*)*\s?([^;\\{}]{1,100});")),
)
_ASKED_FONTS = {found: (parts, pattern) for formats, parts, pattern in _FONT_DECLARATIONS for found in formats}
_FONT_PART_MAX = 1 << 20  # the start of a part, where its font declarations are: never the whole of a huge one


def substituted_fonts(document: Path, found: OfficeFormat, pdf: Path) -> int:
    """How many font families `document` asks for are not on this machine and were drawn with a substitute in `pdf`.

    A family counts when fontconfig has no font of that name and the family fontconfig gives in its place (for
    Calibri, Carlito) is a font of the PDF that the document does not ask for itself. A count, not a proof: a
    family declared and used nowhere counts if its substitute draws another missing one; the families the binary
    formats (.doc, .xls, .ppt) name are not read."""
    asked = _asked_families(document, found)
    if not asked:
        return 0
    installed = {_squeezed(name) for name in _tool_lines(["fc-list", ":", "family"]) for name in name.split(",")}
    drawn = _pdf_font_families(pdf)
    wanted = {_squeezed(family) for family in asked}
    missing = [family for family in asked if _squeezed(family) not in installed]
    substitutes = (_squeezed(_substitute(family)) for family in missing)
    return sum(1 for substitute in substitutes if substitute in drawn and substitute not in wanted)


def _asked_families(document: Path, found: OfficeFormat) -> set[str]:
    parts, pattern = _ASKED_FONTS.get(found, ((), None))
    if pattern is None:
        return set()
    texts: list[bytes] = []
    try:
        if parts is None:
            with document.open("rb") as file:
                texts.append(file.read(_FONT_PART_MAX))
        else:
            with zipfile.ZipFile(document) as package:
                names = set(package.namelist())
                for part in (name for name in parts if name in names):
                    with package.open(part) as entry:
                        texts.append(entry.read(_FONT_PART_MAX))
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        return set()
    decoded = (match.decode("utf-8", "replace") for text in texts for match in pattern.findall(text))
    return {name.replace("&apos;", "").strip("'\" ") for name in decoded} - {""}


def _substitute(family: str) -> str:
    lines = _tool_lines(["fc-match", "-f", "%{family[0]}", family])
    return lines[0] if lines else ""


def _tool_lines(command: list[str]) -> list[str]:
    """What a fontconfig tool prints (font names, never the document's): nothing if it fails, so nothing counts."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


def _pdf_font_families(pdf: Path) -> set[str]:
    """The families of the fonts the PDF's pages use: a base font's name without its subset tag and style."""
    families: set[str] = set()
    with pikepdf.open(pdf) as opened:
        for page in opened.pages:
            fonts = page.obj.get("/Resources", pikepdf.Dictionary()).get("/Font", pikepdf.Dictionary())
            for font in fonts.values() if isinstance(fonts, pikepdf.Dictionary) else ():
                name = str(font.get("/BaseFont", "")).lstrip("/")
                families.add(_squeezed(re.split(r"[-,]", name.partition("+")[2] or name)[0]))
    return families


def _squeezed(name: str) -> str:
    return "".join(name.split()).lower()


def _run(command: list[str], environment: dict[str, str], cwd: Path, left: float, seconds: float) -> int:
    """One run of LibreOffice in a session of its own, killed as a whole when it ends or at the time limit."""
    if left <= 0:
        raise DocJobError(FailureCode.INPUT_TOO_COMPLEX, f"the conversion took longer than {seconds:g} s")
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # can quote the document: never read
        env=environment,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        return process.wait(timeout=left)
    except subprocess.TimeoutExpired:
        raise DocJobError(FailureCode.INPUT_TOO_COMPLEX, f"the conversion took longer than {seconds:g} s") from None
    finally:
        _end_session(process)


def _end_session(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of LibreOffice's session (soffice.bin outlives its launcher on a timeout), then reap."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=_KILL_GRACE_SECONDS)
