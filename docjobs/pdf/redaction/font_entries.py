"""A font dictionary's own entries cut down to the codes still drawn, for font scrubbing
(docjobs/pdf/redaction/subset.py): /Widths, /Encoding /Differences, /ToUnicode and the descriptor's /CharSet."""

from __future__ import annotations

import io

import pikepdf
from pdfminer.cmapdb import CMapParser, FileUnicodeMap
from pikepdf import Name

from docjobs.pdf.budgets import Budgets, decoded_size


def scrub_simple_entries(
    pdf: pikepdf.Pdf, font: pikepdf.Dictionary, renumber: dict[int, int], budgets: Budgets
) -> None:
    """A simple font's own entries down to the drawn codes, by their new ones: /Widths, /Differences, /ToUnicode
    (and its descriptor's /CharSet)."""
    descriptor = font.get(Name.FontDescriptor)
    widths = font.get(Name.Widths)
    if isinstance(widths, pikepdf.Array) and renumber:
        first = int(font.get(Name.FirstChar, 0))
        missing = descriptor.get(Name.MissingWidth, 0) if isinstance(descriptor, pikepdf.Dictionary) else 0
        old = {new: code for code, new in renumber.items()}
        low, high = min(old), max(old)
        font.Widths = pikepdf.Array(
            [
                (widths[old[new] - first] if 0 <= old[new] - first < len(widths) else missing) if new in old else 0
                for new in range(low, high + 1)
            ]
        )
        font.FirstChar, font.LastChar = low, high
    encoding = font.get(Name.Encoding)
    differences = encoding.get(Name.Differences) if isinstance(encoding, pikepdf.Dictionary) else None
    if isinstance(encoding, pikepdf.Dictionary) and isinstance(differences, pikepdf.Array):
        encoding.Differences = kept_differences(differences, set(renumber))
    if isinstance(descriptor, pikepdf.Dictionary) and Name.CharSet in descriptor:
        del descriptor[Name.CharSet]  # glyph names, the removed ones among them
    trim_to_unicode(pdf, font, renumber, 1, budgets)


def kept_differences(differences: pikepdf.Array, codes: set[int]) -> pikepdf.Array:
    """/Differences with only the drawn codes' glyph names."""
    names: dict[int, pikepdf.Object] = {}
    code = 0
    for item in differences:
        if isinstance(item, Name):
            names[code] = item
            code += 1
        else:
            code = int(item)
    kept: list[pikepdf.Object | int] = []
    for code in sorted(set(names) & codes):
        kept += [code, names[code]]
    return pikepdf.Array(kept)


def trim_to_unicode(
    pdf: pikepdf.Pdf, font: pikepdf.Dictionary, codes: dict[int, int], width: int, budgets: Budgets
) -> None:
    """Rewrite /ToUnicode with the drawn codes' entries only (`codes`: old code -> new code)."""
    stream = font.get(Name.ToUnicode)
    if not isinstance(stream, pikepdf.Stream):
        if Name.ToUnicode in font:
            del font[Name.ToUnicode]
        return
    decoded_size(stream, limit=budgets.max_stream_bytes)
    cmap = FileUnicodeMap()
    try:
        CMapParser(cmap, io.BytesIO(stream.read_bytes())).run()
    except Exception:  # noqa: BLE001 - pdfminer raises many kinds on a broken CMap: the entries are dropped
        cmap = FileUnicodeMap()
    entries = {codes[code]: text for code, text in cmap.cid2unichr.items() if code in codes and isinstance(text, str)}
    font.ToUnicode = pdf.make_stream(_to_unicode_cmap(entries, width))


def _to_unicode_cmap(entries: dict[int, str], width: int) -> bytes:
    lines = [
        "/CIDInit /ProcSet findresource begin",
        "12 dict begin",
        "begincmap",
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def",
        "/CMapName /Adobe-Identity-UCS def",
        "/CMapType 2 def",
        "1 begincodespacerange",
        f"<{'00' * width}> <{'FF' * width}>",
        "endcodespacerange",
    ]
    items = sorted(entries.items())
    for start in range(0, len(items), 100):
        chunk = items[start : start + 100]
        lines.append(f"{len(chunk)} beginbfchar")
        lines += [f"<{code:0{2 * width}X}> <{text.encode('utf-16-be').hex().upper()}>" for code, text in chunk]
        lines.append("endbfchar")
    lines += ["endcmap", "CMapName currentdict /CMap defineresource pop", "end", "end"]
    return "\n".join(lines).encode()
