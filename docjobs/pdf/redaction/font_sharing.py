"""Fonts that share what font scrubbing (docjobs/pdf/redaction/subset.py) cuts down: a CIDFont or a descriptor."""

from __future__ import annotations

from dataclasses import dataclass, field

import pikepdf
from pikepdf import Name

from docjobs.pdf.redaction.drawn_codes import DrawnCodes, FontId
from docjobs.pdf.redaction.fonts import descendant_font
from docjobs.pdf.redaction.resources import indirect_id


@dataclass
class FontSharing:
    """Fonts whose cutting down writes to what another font dictionary draws with: a Type0 font's CIDFont, a
    font's descriptor (where its program is kept). A producer may write a Type0 font per page over one CIDFont, or
    a simple font per page over one descriptor. Fonts that read the same codes as the same glyphs there (Type0
    fonts over one CIDFont; simple fonts of one kind with the same encoding) are cut down together, each to the
    codes any of them draws (`pool`), and re-numbered together or not at all (`agree`): one mapping for the
    program they share and the strings of each; a touched font sharing with one that reads its codes otherwise
    cannot be cut down for both: unsafe."""

    groups: list[set[FontId]] = field(default_factory=list)  # fonts cut down together, a touched one among them
    unsafe: set[FontId] = field(default_factory=set)

    @property
    def fellows(self) -> set[FontId]:
        return {key for group in self.groups for key in group}

    @classmethod
    def of(cls, pdf: pikepdf.Pdf, touched: set[FontId]) -> FontSharing:
        by_descriptor: dict[FontId, list[tuple[FontId, str]]] = {}  # descriptor -> (font, how it reads its codes)
        for obj in pdf.objects:
            if not (isinstance(obj, pikepdf.Dictionary) and obj.get(Name.Type) == Name.Font and obj.is_indirect):
                continue
            if obj.get(Name.Subtype) in (Name.CIDFontType0, Name.CIDFontType2):
                continue  # a CIDFont: read through the Type0 fonts over it
            descendant = descendant_font(obj)
            holder = descendant if isinstance(descendant, pikepdf.Dictionary) else obj
            descriptor = indirect_id(holder.get(Name.FontDescriptor))
            if descriptor is not None:
                reading = (
                    f"cidfont {indirect_id(descendant)}"
                    if descendant is not None
                    else f"{obj.get(Name.Subtype)!r} {obj.get(Name.Encoding)!r}"
                )
                by_descriptor.setdefault(descriptor, []).append((obj.objgen, reading))
        sharing = cls()
        for fonts in by_descriptor.values():
            keys = {key for key, _ in fonts}
            if len(keys) < 2 or not keys & touched:
                continue
            if len({reading for _, reading in fonts}) > 1:
                sharing.unsafe.update(keys & touched)
            elif keys not in sharing.groups:
                sharing.groups.append(keys)
        return sharing

    def pool(self, usage: DrawnCodes) -> None:
        """Each font of a group draws, as far as cutting down goes, what any of them draws (in order of first use,
        font by font: the same order for each). A group one of whose fonts draws codes that cannot be told is
        unsafe as a whole."""
        for group in self.groups:
            if group & usage.unsure:
                self.unsafe.update(group)
                continue
            pooled: dict[int, None] = {}
            for key in sorted(group):
                pooled.update(usage.codes.get(key, {}))
            for key in group:
                usage.codes[key] = dict(pooled)

    def agree(self, fresh: dict[FontId, list[int]]) -> dict[FontId, list[int]]:
        """`fresh` (each font's new codes, see `fresh_codes`) with a group's fonts re-numbered only when every one
        of them is, the same way (their pooled codes are the same): else none of them is."""
        for group in self.groups:
            if len({tuple(fresh.get(key, ())) for key in group}) > 1 or not group <= fresh.keys():
                fresh.update({key: [] for key in group if key in fresh})
        return fresh
