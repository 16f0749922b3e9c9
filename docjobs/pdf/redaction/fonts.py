"""Font metrics for content redaction: how a shown string splits into glyphs, and how far each advances.

Redaction judges every glyph by its own box, so it needs each glyph's advance width exactly as a viewer
computes it: simple fonts from /FirstChar + /Widths (the standard 14 fonts from their AFM widths when
/Widths is absent), composite fonts with an Identity CMap from the descendant's /W and /DW, and with a two-byte
predefined CMap from its /DW alone (when it has no /W), vertical ones down the column by its /DW2. A font whose
widths cannot be known is not guessed: its glyphs are reported without a width and the caller treats
the whole baseline as possibly covered (see `FontModel.unknown_reason`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pikepdf
from pikepdf import Name
from reportlab.pdfbase import _fontdata

DEFAULT_ASCENT, DEFAULT_DESCENT = 1.0, -0.25  # em, when a font gives no usable extents
DEFAULT_VERTICAL = (0.88, -1.0)  # em: a CIDFont's /DW2 when absent, its vertical origin's height and advance
# Predefined CMaps whose codes are all two bytes (the Identity ones, JIS X 0208's H and V, the UCS-2 ones). With
# no /W (every glyph /DW wide) their glyphs are placed without knowing which CID a code selects.
_TWO_BYTE_CMAPS = frozenset(
    {"H", "V"} | {f"Uni{collection}-UCS2-{mode}" for collection in ("JIS", "GB", "CNS", "KS") for mode in "HV"}
)
_STANDARD_ALIASES = {"Arial": "Helvetica", "TimesNewRoman": "Times", "CourierNew": "Courier"}
_STYLE_SUFFIXES = {
    "Helvetica": {"": "", "Bold": "-Bold", "Italic": "-Oblique", "BoldItalic": "-BoldOblique"},
    "Times": {"": "-Roman", "Bold": "-Bold", "Italic": "-Italic", "BoldItalic": "-BoldItalic"},
    "Courier": {"": "", "Bold": "-Bold", "Italic": "-Oblique", "BoldItalic": "-BoldOblique"},
}


@dataclass(frozen=True)
class Glyph:
    code: bytes
    width: float | None  # horizontal advance in text space units per unit of font size; None = unknown
    is_space: bool  # single-byte code 32, the only code word spacing (Tw) applies to


@dataclass(frozen=True)
class FontModel:
    """What redaction needs to know about one font dictionary.

    `unknown_reason` is the UnsafePage reason to raise when a glyph whose width is unknown may lie under
    a region (unknown widths, an unsupported encoding). Type3 glyphs cannot be removed at all, so one
    under a region makes the page unsafe. `vertical` fonts (writing mode 1) advance downwards by
    `vertical_metrics[1]` em, each glyph hanging from its origin by `vertical_metrics[0]` (the /DW2; None: a /W2
    gives glyphs metrics of their own, which are not read). A glyph of a font whose codes are not CIDs
    (`removable` False: a predefined CMap other than Identity) is placed, but one under a region makes the page
    unsafe, as does a vertical glyph: neither is removed nor re-set.
    """

    two_byte: bool = False
    widths: dict[int, float] = field(default_factory=dict)
    default_width: float | None = None
    ascent: float = DEFAULT_ASCENT
    descent: float = DEFAULT_DESCENT
    unknown_reason: str = "unknown_widths"
    type3: bool = False
    vertical: bool = False
    vertical_metrics: tuple[float, float] | None = None
    removable: bool = True
    unknown_codes: bool = False  # the bytes cannot even be split into codes (unsupported CMap)

    def glyphs(self, data: bytes) -> Iterator[Glyph]:
        if self.unknown_codes:
            yield Glyph(data, None, False)
            return
        step = 2 if self.two_byte else 1
        for start in range(0, len(data) - step + 1, step):
            code = data[start : start + step]
            value = int.from_bytes(code, "big")
            yield Glyph(code, self.widths.get(value, self.default_width), step == 1 and value == 32)


UNKNOWN_FONT = FontModel(unknown_codes=True)


def font_model(font: pikepdf.Object | None) -> FontModel:
    """The model of a /Font resource (UNKNOWN_FONT for anything that is not a font dictionary)."""
    if not isinstance(font, pikepdf.Dictionary):
        return UNKNOWN_FONT
    subtype = font.get(Name.Subtype)
    try:
        if subtype == Name.Type0:
            return _composite(font)
        if subtype == Name.Type3:
            return _type3(font)
        return _simple(font)
    except (TypeError, ValueError, KeyError, IndexError):  # a malformed entry: no metric is trusted
        return UNKNOWN_FONT


def _simple(font: pikepdf.Dictionary) -> FontModel:
    descriptor = font.get(Name.FontDescriptor)
    standard = _standard_name(font)
    ascent, descent = _extents(descriptor, standard)
    widths_array = font.get(Name.Widths)
    if isinstance(widths_array, pikepdf.Array):
        first = int(font.get(Name.FirstChar, 0))
        widths = {first + index: float(width) / 1000 for index, width in enumerate(widths_array)}
        missing = float(descriptor.get(Name.MissingWidth, 0)) if isinstance(descriptor, pikepdf.Dictionary) else 0.0
        return FontModel(widths=widths, default_width=missing / 1000, ascent=ascent, descent=descent)
    if standard is None:
        return FontModel(ascent=ascent, descent=descent)
    names = _encoding(font, standard)
    metrics = _fontdata.widthsByFontGlyph[standard]
    widths = {code: metrics[name] / 1000 for code, name in enumerate(names) if name in metrics}
    return FontModel(widths=widths, ascent=ascent, descent=descent)


def descendant_font(font: pikepdf.Dictionary) -> pikepdf.Object | None:
    """A Type0 font's CIDFont, the first of its /DescendantFonts (None when there is none)."""
    descendants = font.get(Name.DescendantFonts)
    return descendants[0] if isinstance(descendants, pikepdf.Array) and len(descendants) else None


def _composite(font: pikepdf.Dictionary) -> FontModel:
    encoding = font.get(Name.Encoding)
    descendant = descendant_font(font)
    if not isinstance(descendant, pikepdf.Dictionary):
        return UNKNOWN_FONT
    ascent, descent = _extents(descendant.get(Name.FontDescriptor), None)
    cmap = str(encoding)[1:] if isinstance(encoding, Name) else ""
    identity = cmap in ("Identity-H", "Identity-V")
    if not identity and cmap not in _TWO_BYTE_CMAPS:
        return FontModel(ascent=ascent, descent=descent, unknown_reason="unsupported_encoding", unknown_codes=True)
    widths = _cid_widths(descendant.get(Name.W))
    if widths is None or (widths and not identity):  # widths by CID, and the codes are not CIDs
        reason = "unknown_widths" if identity else "unsupported_encoding"
        return FontModel(ascent=ascent, descent=descent, unknown_reason=reason, unknown_codes=True)
    vertical = cmap == "V" or cmap.endswith("-V")
    return FontModel(
        two_byte=True,
        widths=widths,
        default_width=float(descendant.get(Name.DW, 1000)) / 1000,
        ascent=ascent,
        descent=descent,
        vertical=vertical,
        vertical_metrics=_vertical_metrics(descendant) if vertical else None,
        removable=identity,
    )


def _vertical_metrics(descendant: pikepdf.Dictionary) -> tuple[float, float] | None:
    """A vertical CIDFont's /DW2 in em (DEFAULT_VERTICAL when absent); None when a /W2 sets glyphs' own."""
    if Name.W2 in descendant:
        return None
    dw2 = descendant.get(Name.DW2)
    if dw2 is None:
        return DEFAULT_VERTICAL
    if not isinstance(dw2, pikepdf.Array) or len(dw2) != 2:
        return None
    return float(dw2[0]) / 1000, float(dw2[1]) / 1000


def _cid_widths(array: pikepdf.Object | None) -> dict[int, float] | None:
    """A CIDFont /W array (`c [w1 w2 ...]` and `first last w` runs) as cid -> width in em."""
    if array is None:
        return {}
    if not isinstance(array, pikepdf.Array):
        return None
    items = list(array)
    widths: dict[int, float] = {}
    index = 0
    try:
        while index < len(items):
            first = int(items[index])
            if isinstance(items[index + 1], pikepdf.Array):
                for offset, width in enumerate(items[index + 1]):
                    widths[first + offset] = float(width) / 1000
                index += 2
            else:
                last, run_width = int(items[index + 1]), float(items[index + 2]) / 1000
                if last - first > 0xFFFF:
                    return None
                widths.update(dict.fromkeys(range(first, last + 1), run_width))
                index += 3
    except (IndexError, TypeError, ValueError):
        return None
    return widths


def _type3(font: pikepdf.Dictionary) -> FontModel:
    """Type3 glyphs are procedures: any of them under a region makes the page unsafe, so only the
    advances (to place later glyphs) and a box (to tell whether a glyph is under a region) are needed."""
    matrix = font.get(Name.FontMatrix)
    scale = [float(v) for v in matrix] if isinstance(matrix, pikepdf.Array) and len(matrix) == 6 else [0.001] * 4
    bbox = font.get(Name.FontBBox)
    ascent, descent = DEFAULT_ASCENT, DEFAULT_DESCENT
    if isinstance(bbox, pikepdf.Array) and len(bbox) == 4 and any(float(v) for v in bbox):
        ys = [float(bbox[i]) * scale[1] + float(bbox[j]) * scale[3] for i in (0, 2) for j in (1, 3)]
        ascent, descent = max(*ys, DEFAULT_ASCENT), min(*ys, DEFAULT_DESCENT)
    widths_array = font.get(Name.Widths)
    if not isinstance(widths_array, pikepdf.Array):
        return FontModel(ascent=ascent, descent=descent, unknown_reason="type3_font", type3=True)
    first = int(font.get(Name.FirstChar, 0))
    widths = {first + index: float(width) * scale[0] for index, width in enumerate(widths_array)}
    return FontModel(widths=widths, default_width=0.0, ascent=ascent, descent=descent, type3=True)


def _standard_name(font: pikepdf.Dictionary) -> str | None:
    """The standard-14 font a /BaseFont names (subset prefix and the common Windows aliases allowed)."""
    base = str(font.get(Name.BaseFont, ""))[1:]
    if len(base) > 7 and base[6] == "+":
        base = base[7:]
    if base in _fontdata.standardFonts:
        return base
    family, _, style = base.partition(",")
    family = _STANDARD_ALIASES.get(family, family)
    suffix = _STYLE_SUFFIXES.get(family, {}).get(style)
    return family + suffix if suffix is not None else None


def _encoding(font: pikepdf.Dictionary, standard: str) -> list[str | None]:
    """Glyph names by code for a standard-14 font: base encoding plus /Differences."""
    builtin = {"Symbol": "SymbolEncoding", "ZapfDingbats": "ZapfDingbatsEncoding"}.get(standard, "StandardEncoding")
    return glyph_names(font, _fontdata.encodings[builtin])


def glyph_names(font: pikepdf.Dictionary, builtin: Sequence[str | None]) -> list[str | None]:
    """Glyph names by code (256 of them) of a simple font with named glyphs (Type1, bare CFF): the encoding its
    /Encoding names (itself or as /BaseEncoding), else `builtin` (the program's own), with /Differences applied."""
    encoding = font.get(Name.Encoding)
    base = encoding.get(Name.BaseEncoding) if isinstance(encoding, pikepdf.Dictionary) else encoding
    named = _fontdata.encodings.get(str(base)[1:]) if isinstance(base, Name) else None
    names = list(named or builtin)[:256]
    names += [None] * (256 - len(names))
    differences = encoding.get(Name.Differences) if isinstance(encoding, pikepdf.Dictionary) else None
    code = 0
    for item in differences if isinstance(differences, pikepdf.Array) else []:
        if isinstance(item, Name):
            if 0 <= code < len(names):
                names[code] = str(item)[1:]
            code += 1
        else:
            code = int(item)
    return names


def _extents(descriptor: pikepdf.Object | None, standard: str | None) -> tuple[float, float]:
    """(ascent, descent) in em from a FontDescriptor, else the standard-14 AFM, else a safe default."""
    ascent, descent = 0.0, 0.0
    if isinstance(descriptor, pikepdf.Dictionary):
        ascent = float(descriptor.get(Name.Ascent, 0)) / 1000
        descent = float(descriptor.get(Name.Descent, 0)) / 1000
    elif standard is not None:
        ascent, descent = (value / 1000 for value in _fontdata.ascent_descent[standard])
    return (ascent if ascent > 0 else DEFAULT_ASCENT), (descent if descent < 0 else DEFAULT_DESCENT)
