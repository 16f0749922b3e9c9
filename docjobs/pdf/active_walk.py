"""Active content, as the release gate finds it: a counting walk over what pypdf reads, pure Python (no C/C++ PDF
reader: the gate's import contract in pyproject.toml), of the places docjobs/pdf/sanitize.py strips, with its tables
(docjobs/pdf/active_kinds.py), each object once and within a budget of objects."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from pypdf import PdfReader
from pypdf import generic as pdf

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.pdf.active_kinds import (
    ACTIVE_ANNOTATIONS,
    MAX_NODES,
    NOT_A_NAME,
    WalkBudget,
    action_kind_of,
    uri_kind,
)

ObjId = tuple[int, int]


def _resolve(value: Any) -> tuple[Any, ObjId | None]:
    """The object `value` is (an indirect reference followed), and its object ID if it is an indirect one."""
    if isinstance(value, pdf.IndirectObject):
        ident = (value.idnum, value.generation)
        try:
            return value.get_object(), ident
        except Exception:  # noqa: BLE001 - a reference to nothing: null, as the standard says
            return None, ident
    return value, None


def _raw(holder: Any, key: str) -> Any:
    return holder.raw_get(key) if isinstance(holder, pdf.DictionaryObject) and key in holder else None


def _get(holder: Any, key: str) -> Any:
    return _resolve(_raw(holder, key))[0]


def action_kind(action: pdf.DictionaryObject) -> str | None:
    """The kind of active content an action is (as docjobs/pdf/sanitize.py's `action_kind`), or None: inert."""
    subtype = _get(action, "/S")
    name = None if subtype is None else str(subtype) if isinstance(subtype, pdf.NameObject) else NOT_A_NAME
    return action_kind_of(name, has_js="/JS" in action, remote="/F" in action, uri=lambda: _uri_kind(action))


def _uri_kind(action: pdf.DictionaryObject) -> str | None:
    uri = _get(action, "/URI")
    if isinstance(uri, pdf.TextStringObject):
        return uri_kind(uri.original_bytes)
    return uri_kind(bytes(uri)) if isinstance(uri, bytes) else None


class _Walk:
    """One counting pass over a document's active content: the places docjobs/pdf/sanitize.py's `_Pass` looks
    (catalog /OpenAction and /AA, the /JavaScript and /EmbeddedFiles name trees, XFA, /AF, bookmarks, form fields,
    page /AA, annotations and their /A, /PA, /AA, /Next chains), each object once, within one budget."""

    def __init__(self, reader: PdfReader, *, keep_attachments: bool) -> None:
        self._reader = reader
        self._keep_attachments = keep_attachments
        self._budget = WalkBudget(MAX_NODES)
        self._found: Counter[str] = Counter()
        self._actions_seen: set[ObjId] = set()
        self._holders_seen: set[tuple[ObjId, str]] = set()
        self._annotations_seen: set[ObjId] = set()

    def run(self) -> dict[str, int]:
        root_raw = self._reader.trailer.raw_get("/Root")
        root, root_id = _resolve(root_raw)
        if not isinstance(root, pdf.DictionaryObject):
            raise DocJobError(FailureCode.FIDELITY_READER, "the release gate's reader found no document catalog")
        self._action(root, root_id, "/OpenAction")  # an array there is a destination: inert
        self._triggers(root, root_id)
        self._name_trees(root)
        self._xfa(root)
        self._associated_files(root)
        outlines = _get(root, "/Outlines")
        for item, ident in self._reachable([_raw(outlines, "/First")], ("/First", "/Next")):
            self._action(item, ident, "/A")
        form = _get(root, "/AcroForm")
        for field, ident in self._reachable([_raw(form, "/Fields")], ("/Kids",)):
            self._action(field, ident, "/A")
            self._triggers(field, ident)
        for page in self._reader.pages:
            self._budget.spend()
            ident = _ident(page)
            self._triggers(page, ident)
            self._associated_files(page)
            self._annotations(page)
        return dict(sorted(self._found.items()))

    def _reachable(
        self, start: Iterable[Any], keys: tuple[str, ...], seen: set[ObjId] | None = None
    ) -> Iterator[tuple[pdf.DictionaryObject, ObjId | None]]:
        """Each dictionary reachable from `start` through `keys` (arrays looked into), once."""
        seen = set() if seen is None else seen
        pending = list(start)
        while pending:
            item, ident = _resolve(pending.pop())
            self._budget.spend()
            if not isinstance(item, pdf.ArrayObject | pdf.DictionaryObject):
                continue
            if ident is not None:
                if ident in seen:
                    continue
                seen.add(ident)
            if isinstance(item, pdf.ArrayObject):
                pending.extend(item)  # pypdf's arrays give their items as they are: references unresolved
                continue
            following = [_raw(item, key) for key in keys]
            yield item, ident
            pending.extend(following)

    def _first_visit(self, ident: ObjId | None, key: str) -> bool:
        if ident is None:
            return True
        mark = (ident, key)
        if mark in self._holders_seen:
            return False
        self._holders_seen.add(mark)
        return True

    def _action(self, holder: Any, ident: ObjId | None, key: str) -> None:
        head = _raw(holder, key)
        if not isinstance(_resolve(head)[0], pdf.DictionaryObject) or not self._first_visit(ident, key):
            return
        for action, _ in self._reachable([head], ("/Next",), self._actions_seen):
            kind = action_kind(action)
            if kind is not None:
                self._found[kind] += 1

    def _triggers(self, holder: Any, ident: ObjId | None) -> None:
        triggers, triggers_id = _resolve(_raw(holder, "/AA"))
        if not isinstance(triggers, pdf.DictionaryObject) or not self._first_visit(ident, "/AA"):
            return
        for event in list(triggers.keys()):
            self._budget.spend()
            self._action(triggers, triggers_id, str(event))

    def _name_trees(self, root: pdf.DictionaryObject) -> None:
        names = _get(root, "/Names")
        if not isinstance(names, pdf.DictionaryObject):
            return
        if "/JavaScript" in names:
            for script in self._tree_values(_raw(names, "/JavaScript")):
                if isinstance(_resolve(script)[0], pdf.DictionaryObject):
                    for action, _ in self._reachable([script], ("/Next",), self._actions_seen):
                        kind = action_kind(action)
                        if kind is not None:
                            self._found[kind] += 1
        if "/EmbeddedFiles" in names and not self._keep_attachments:
            self._found["embedded_file"] += sum(1 for _ in self._tree_values(_raw(names, "/EmbeddedFiles")))

    def _tree_values(self, root: Any) -> Iterator[Any]:
        for node, _ in self._reachable([root], ("/Kids",)):
            pairs = _get(node, "/Names")
            if isinstance(pairs, pdf.ArrayObject):
                for index in range(1, len(pairs), 2):
                    self._budget.spend()
                    yield pairs[index]

    def _xfa(self, root: pdf.DictionaryObject) -> None:
        form = _get(root, "/AcroForm")
        if isinstance(form, pdf.DictionaryObject) and "/XFA" in form:
            self._found["xfa"] += 1

    def _associated_files(self, holder: Any) -> None:
        if self._keep_attachments or not isinstance(holder, pdf.DictionaryObject) or "/AF" not in holder:
            return
        files = _get(holder, "/AF")
        self._found["embedded_file"] += len(files) if isinstance(files, pdf.ArrayObject) else 1

    def _annotations(self, page: pdf.DictionaryObject) -> None:
        annotations = _get(page, "/Annots")
        if not isinstance(annotations, pdf.ArrayObject):
            return
        for index in range(len(annotations)):
            self._budget.spend()
            annotation, ident = _resolve(annotations[index])
            if not isinstance(annotation, pdf.DictionaryObject):
                continue
            first = ident is None or ident not in self._annotations_seen
            if ident is not None:
                self._annotations_seen.add(ident)
            if not first:
                continue
            kind = self._annotation_kind(annotation)
            if kind is not None:
                self._found[kind] += 1
                continue
            for key in ("/A", "/PA"):
                self._action(annotation, ident, key)
            self._triggers(annotation, ident)
            self._associated_files(annotation)

    def _annotation_kind(self, annotation: pdf.DictionaryObject) -> str | None:
        subtype = _get(annotation, "/Subtype")
        if not isinstance(subtype, pdf.NameObject):
            return None
        if str(subtype) == "/FileAttachment" and not self._keep_attachments:
            return "embedded_file"
        return ACTIVE_ANNOTATIONS.get(str(subtype))


def _ident(item: Any) -> ObjId | None:
    reference = getattr(item, "indirect_reference", None)
    return (reference.idnum, reference.generation) if isinstance(reference, pdf.IndirectObject) else None


def find_active_content(reader: PdfReader, *, keep_attachments: bool = False) -> dict[str, int]:
    """The active content of the document `reader` reads, kind -> count (empty when it has none).

    Raises DocJobError input.too_complex when the walk exceeds its budget."""
    return _Walk(reader, keep_attachments=keep_attachments).run()
