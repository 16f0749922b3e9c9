"""Copy-on-write resources and marked-content scrubbing for content redaction.

Producers share /Resources dictionaries, form XObjects and property lists between pages, so an edit
is never made in place: the first change a page (or a page-private form copy) makes to its resources
gives it its own shallow copy of /Resources and of the category dictionary touched, and repoints only
its own entry. Everything other pages reference stays as it was.

One XObject drawn twice on a page (a letterhead form, a logo) may be under a region at one place and
not at the other: each draw is redacted on its own, and a later draw that needs a different object
than the name now holds gets a fresh resource name (see `ResourceScope.place`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pikepdf
from pikepdf import Name

Instruction = pikepdf.ContentStreamInstruction | pikepdf.ContentStreamInlineImage
# Marked-content properties that hold a replacement or description of the content they enclose.
TEXT_ALTERNATIVES = (Name.ActualText, Name.Alt, Name.E)


class ResourceScope:
    """The resources one content stream resolves names in, privately copied on the first write."""

    def __init__(self, holder: pikepdf.Object, resources: pikepdf.Object | None) -> None:
        self.holder = holder  # the page or form XObject whose /Resources this is
        self.resources = resources if isinstance(resources, pikepdf.Dictionary) else pikepdf.Dictionary()
        self.changed = False
        self._private_categories: set[str] = set()
        self._originals: dict[tuple[str, str], pikepdf.Object] = {}  # what names we repointed held before
        self._drawn: set[tuple[str, str]] = set()

    def get(self, category: Name, name: pikepdf.Object) -> pikepdf.Object | None:
        entries = self.resources.get(category)
        if not isinstance(entries, pikepdf.Dictionary) or not isinstance(name, Name):
            return None
        return entries.get(name)

    def original(self, category: Name, name: Name) -> pikepdf.Object | None:
        """What the name referred to before this walk repointed it."""
        return self._originals.get((str(category), str(name)), self.get(category, name))

    def place(self, category: Name, name: Name, value: pikepdf.Object) -> Name | None:
        """Make one use (a draw) of `name` show `value`; returns the name to use instead, if it changed.

        The first use repoints the name itself; a later use that needs another object than the name
        now holds gets a fresh name, so earlier uses keep showing what they showed."""
        key = (str(category), str(name))
        first_use = key not in self._drawn
        self._drawn.add(key)
        current = self.get(category, name)
        if current is not None and value.is_indirect and current.objgen == value.objgen:
            return None
        if first_use:
            if current is not None:
                self._originals.setdefault(key, current)
            self.set(category, name, value)
            return None
        suffix = 1
        while self.get(category, Name(f"{name}_r{suffix}")) is not None:
            suffix += 1
        fresh = Name(f"{name}_r{suffix}")
        self.set(category, fresh, value)
        return fresh

    def set(self, category: Name, name: Name, value: pikepdf.Object) -> None:
        if not self.changed:
            self.resources = pikepdf.Dictionary(dict(self.resources.items()))
            self.holder[Name.Resources] = self.resources
            self.changed = True
        if str(category) not in self._private_categories:
            entries = self.resources.get(category)
            items = dict(entries.items()) if isinstance(entries, pikepdf.Dictionary) else {}
            self.resources[category] = pikepdf.Dictionary(items)
            self._private_categories.add(str(category))
        self.resources[category][name] = value


@dataclass
class MarkedContent:
    """One open marked-content sequence: where its BDC is in the rewritten stream, and whether
    redacted content lies inside it."""

    instructions: list[Instruction]
    index: int
    scope: ResourceScope
    dirty: bool = field(default=False)

    def close(self, pdf: pikepdf.Pdf) -> bool:
        """Drop /ActualText, /Alt and /E from the properties if redacted content lies inside; True
        when that replaced the BDC instruction (a named property list is replaced in the resources)."""
        instruction = self.instructions[self.index]
        if not self.dirty or not isinstance(instruction, pikepdf.ContentStreamInstruction):
            return False
        if str(instruction.operator) != "BDC" or len(instruction.operands) != 2:
            return False
        tag, properties = instruction.operands
        if isinstance(properties, pikepdf.Dictionary):
            scrubbed = _without_alternatives(properties)
            if scrubbed is not None:
                self.instructions[self.index] = pikepdf.ContentStreamInstruction([tag, scrubbed], instruction.operator)
                return True
        elif isinstance(properties, Name) and tag != Name.OC:  # optional-content groups are matched by identity
            named = self.scope.get(Name.Properties, properties)
            scrubbed = _without_alternatives(named) if isinstance(named, pikepdf.Dictionary) else None
            if scrubbed is not None:
                self.scope.set(Name.Properties, properties, pdf.make_indirect(scrubbed))
        return False


def _without_alternatives(properties: pikepdf.Dictionary) -> pikepdf.Dictionary | None:
    """A copy of `properties` without the text alternatives (None if it has none)."""
    if not any(key in properties for key in TEXT_ALTERNATIVES):
        return None
    return pikepdf.Dictionary({key: value for key, value in properties.items() if Name(key) not in TEXT_ALTERNATIVES})


def inherited_resources(page: pikepdf.Dictionary) -> pikepdf.Object | None:
    """/Resources of the page, or of the nearest /Pages ancestor that carries it."""
    node: pikepdf.Object | None = page
    for _ in range(64):  # a bounded walk: a /Parent loop must not hang
        if not isinstance(node, pikepdf.Dictionary):
            return None
        if Name.Resources in node:
            return node[Name.Resources]
        node = node.get(Name.Parent)
    return None


def indirect_id(obj: pikepdf.Object | None) -> tuple[int, int] | None:
    """The object id of an indirect dictionary (a font, its descriptor...); None for anything else."""
    return obj.objgen if isinstance(obj, pikepdf.Dictionary) and obj.is_indirect else None
