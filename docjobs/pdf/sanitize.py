"""Active content out before anything is signed: what the organization signs must not run code, reach
outside the document or carry files of its own.

Kinds (the keys of the counts in the status and the evidence; never names, URLs or script text):

  javascript     JavaScript actions (and any action with a /JS entry), `javascript:`/`vbscript:` URIs, the
                 scripts of the /Names /JavaScript tree
  launch         /Launch actions and `file:` URIs (run or open something outside the viewer)
  submit_form    /SubmitForm (sends form data, and so document data, to a URL)
  import_data    /ImportData (loads form data from a file)
  goto_remote    /GoToR, /GoToE, and /Thread with a file: open another (or an embedded) document
  rich_media     /RichMedia and /3D annotations, /RichMediaExecute and /GoTo3DView actions
  media          /Screen, /Movie and /Sound annotations, /Rendition, /Movie and /Sound actions: they play
                 through plug-ins, and a rendition action may carry JavaScript
  visibility     /SetOCGState and /Hide actions: they show or hide layers (optional content) and annotations
                 on a click or when a page opens, so what a certified document shows could change after signing
                 (a layer or an annotation over the watermark, text that appears only on screen)
  other_action   an action type that the PDF standard does not define (what a viewer does with it is unknown)
  embedded_file  /Names /EmbeddedFiles entries, /FileAttachment annotations and /AF associated files of the
                 catalog, pages and annotations (unless the policy keeps attachments)
  xfa            an /AcroForm /XFA form (it carries its own scripts)

Inert and kept: GoTo, URI (other schemes), Named, Thread within the file, ResetForm and Trans actions, so links
to the web and within the document survive.

Actions live in the catalog's /OpenAction and /AA, page /AA, annotation /A, /PA and /AA, form field /A and
/AA, bookmark /A, and follow each other through /Next. A chain is cut at its first active action: the
actions after it go too (counted when they are active themselves).

Hostile files loop name trees, bookmarks, fields and /Next chains: every walk keeps a visited set, and one
pass spends from one budget (`input.too_complex` when exhausted).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.policy import SanitizeMode, SanitizePolicy
from docjobs.pdf.active_kinds import (
    ACTIVE_ANNOTATIONS,
    MAX_NODES,
    NOT_A_NAME,
    WalkBudget,
    action_kind_of,
    uri_kind,
)

ObjGen = tuple[int, int]


def _reachable(
    start: Iterable[object],
    children: Callable[[Dictionary], list[object]],
    budget: WalkBudget,
    seen: set[ObjGen] | None = None,
) -> Iterator[Dictionary]:
    """Each dictionary reachable from `start` through `children` (arrays are looked into), once: indirect
    objects are remembered in `seen`, so a cycle or a shared node ends the walk there."""
    seen = set() if seen is None else seen
    pending = list(start)
    while pending:
        item = pending.pop()
        budget.spend()
        if not isinstance(item, Array | Dictionary):
            continue
        if item.is_indirect:
            if item.objgen in seen:
                continue
            seen.add(item.objgen)
        if isinstance(item, Array):
            pending.extend(item)
            continue
        following = children(item)  # read before the caller may change the node
        yield item
        pending.extend(following)


def _via(*keys: str) -> Callable[[Dictionary], list[object]]:
    return lambda node: [node.get(key) for key in keys]


def action_kind(action: Dictionary) -> str | None:
    """The kind of active content an action is (see the module docstring), or None when it is inert."""
    subtype = action.get("/S")
    name = None if subtype is None else str(subtype) if isinstance(subtype, Name) else NOT_A_NAME
    return action_kind_of(
        name, has_js="/JS" in action, remote="/F" in action, uri=lambda: _uri_kind(action.get("/URI"))
    )


def _uri_kind(uri: object) -> str | None:
    if not isinstance(uri, pikepdf.String):
        return None
    return uri_kind(bytes(uri))


class _Pass:
    """One walk over a document that counts its active content and, with `strip`, removes it."""

    def __init__(self, pdf: pikepdf.Pdf, *, strip: bool, keep_attachments: bool) -> None:
        self._pdf = pdf
        self._strip = strip
        self._keep_attachments = keep_attachments
        self._budget = WalkBudget(MAX_NODES)
        self._found: Counter[str] = Counter()
        self._actions_seen: set[ObjGen] = set()  # an action reachable from several places counts once
        self._holders_seen: set[tuple[ObjGen, str]] = set()
        self._annotations_seen: set[ObjGen] = set()

    def run(self) -> dict[str, int]:
        root = self._pdf.Root
        self._action(root, "/OpenAction")  # an array there is a destination: inert
        self._triggers(root)
        self._name_trees()
        self._xfa()
        self._associated_files(root)
        for item in _reachable([self._outline_start()], _via("/First", "/Next"), self._budget):
            self._action(item, "/A")
        for field in _reachable([self._fields()], _via("/Kids"), self._budget):
            self._action(field, "/A")
            self._triggers(field)
        for page in self._pdf.pages:
            self._budget.spend()
            self._triggers(page.obj)
            self._associated_files(page.obj)
            self._annotations(page.obj)
        return dict(sorted(self._found.items()))

    def _first_visit(self, holder: pikepdf.Object, key: str) -> bool:
        """False when this entry of an indirect object (a field that is also a widget) was handled already."""
        if not holder.is_indirect:
            return True
        mark = (holder.objgen, key)
        if mark in self._holders_seen:
            return False
        self._holders_seen.add(mark)
        return True

    def _action(self, holder: pikepdf.Object, key: str) -> None:
        head = holder.get(key)
        if not isinstance(head, Dictionary) or not self._first_visit(holder, key):
            return
        self._chain(head)
        if self._strip and action_kind(head) is not None:
            del holder[key]

    def _chain(self, head: Dictionary) -> None:
        """Count the active actions of a /Next chain; with `strip`, cut every inert one off an active successor."""
        for action in _reachable([head], _via("/Next"), self._budget, self._actions_seen):
            kind = action_kind(action)
            if kind is not None:
                self._found[kind] += 1
            elif self._strip and "/Next" in action:
                following = action.Next
                items = list(following) if isinstance(following, Array) else [following]
                kept = [item for item in items if isinstance(item, Dictionary) and action_kind(item) is None]
                if len(kept) != len(items):
                    if kept:
                        action.Next = Array(kept)
                    else:
                        del action["/Next"]

    def _triggers(self, holder: pikepdf.Object) -> None:
        """The /AA dictionary (document, page, annotation or field events): one action per event."""
        triggers = holder.get("/AA")
        if not isinstance(triggers, Dictionary) or not self._first_visit(holder, "/AA"):
            return
        for event in list(triggers.keys()):
            self._budget.spend()
            self._action(triggers, event)
        if self._strip and not list(triggers.keys()):
            del holder["/AA"]

    def _name_trees(self) -> None:
        names = self._pdf.Root.get("/Names")
        if not isinstance(names, Dictionary):
            return
        if "/JavaScript" in names:
            for script in self._tree_values(names.JavaScript):
                if isinstance(script, Dictionary):
                    self._chain(script)
            if self._strip:
                del names["/JavaScript"]
        if "/EmbeddedFiles" in names and not self._keep_attachments:
            self._found["embedded_file"] += sum(1 for _ in self._tree_values(names.EmbeddedFiles))
            if self._strip:
                del names["/EmbeddedFiles"]
        if self._strip and not list(names.keys()):
            del self._pdf.Root["/Names"]

    def _tree_values(self, root: object) -> Iterator[object]:
        for node in _reachable([root], _via("/Kids"), self._budget):
            pairs = node.get("/Names")
            if isinstance(pairs, Array):
                for index in range(1, len(pairs), 2):
                    self._budget.spend()
                    yield pairs[index]

    def _xfa(self) -> None:
        form = self._pdf.Root.get("/AcroForm")
        if isinstance(form, Dictionary) and "/XFA" in form:
            self._found["xfa"] += 1
            if self._strip:
                del form["/XFA"]
                if "/NeedsRendering" in self._pdf.Root:
                    del self._pdf.Root["/NeedsRendering"]  # it asks the viewer to draw the XFA form

    def _associated_files(self, holder: pikepdf.Object) -> None:
        files = holder.get("/AF")
        if files is None or self._keep_attachments:
            return
        self._found["embedded_file"] += len(files) if isinstance(files, Array) else 1
        if self._strip:
            del holder["/AF"]

    def _outline_start(self) -> object:
        outlines = self._pdf.Root.get("/Outlines")
        return outlines.get("/First") if isinstance(outlines, Dictionary) else None

    def _fields(self) -> object:
        form = self._pdf.Root.get("/AcroForm")
        return form.get("/Fields") if isinstance(form, Dictionary) else None

    def _annotations(self, page: pikepdf.Object) -> None:
        annotations = page.get("/Annots")
        if not isinstance(annotations, Array):
            return
        kept: list[object] = []
        for annotation in list(annotations):
            self._budget.spend()
            if not isinstance(annotation, Dictionary):
                kept.append(annotation)
                continue
            first = not annotation.is_indirect or annotation.objgen not in self._annotations_seen
            if annotation.is_indirect:
                self._annotations_seen.add(annotation.objgen)
            kind = self._annotation_kind(annotation)
            if kind is not None:
                if first:
                    self._found[kind] += 1
                continue
            kept.append(annotation)
            if first:
                for key in ("/A", "/PA"):
                    self._action(annotation, key)
                self._triggers(annotation)
                self._associated_files(annotation)
        if self._strip and len(kept) != len(annotations):
            page.Annots = Array(kept)

    def _annotation_kind(self, annotation: Dictionary) -> str | None:
        subtype = annotation.get("/Subtype")
        if not isinstance(subtype, Name):
            return None
        if subtype == Name.FileAttachment and not self._keep_attachments:
            return "embedded_file"
        return ACTIVE_ANNOTATIONS.get(str(subtype))


def strip_active_content(pdf: pikepdf.Pdf, *, keep_attachments: bool = False) -> dict[str, int]:
    """Remove the active content of `pdf` in place (the caller saves it); returns what went: kind -> count."""
    return _Pass(pdf, strip=True, keep_attachments=keep_attachments).run()


def find_active_content(path: Path, *, keep_attachments: bool = False) -> dict[str, int]:
    """The active content of the PDF at `path`, kind -> count (empty when it has none)."""
    with pikepdf.open(path) as pdf:
        return _Pass(pdf, strip=False, keep_attachments=keep_attachments).run()


def sanitize_file(path: Path, policy: SanitizePolicy) -> dict[str, int]:
    """Apply `policy` to the validated PDF at `path`, rewriting it when something was removed; returns what was.

    Raises DocJobError `input.active_content` in `fail` mode when the input has any."""
    if policy.mode is SanitizeMode.KEEP:
        return {}
    if policy.mode is SanitizeMode.FAIL:
        found = find_active_content(path, keep_attachments=policy.keep_attachments)
        if found:
            kinds = ", ".join(found)
            raise DocJobError(
                FailureCode.INPUT_ACTIVE_CONTENT, f"the input has active content ({kinds}); the policy refuses it"
            )
        return {}
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        removed = strip_active_content(pdf, keep_attachments=policy.keep_attachments)
        if removed:
            pdf.save(path, deterministic_id=True)  # a retried job writes identical bytes
    return removed


def check_no_active_content(path: Path, policy: SanitizePolicy) -> list[str]:
    """The verify gate on the bytes to be released: none may remain (`sanitize.residue`) unless kept by policy.

    Returns the name of the passed check (none in `keep` mode)."""
    if policy.mode is SanitizeMode.KEEP:
        return []
    if find_active_content(path, keep_attachments=policy.keep_attachments):
        raise DocJobError(FailureCode.SANITIZE_RESIDUE)
    return ["no_active_content"]
