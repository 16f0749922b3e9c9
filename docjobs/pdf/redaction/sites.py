"""Every place outside the page content where a PDF keeps text, and how to take that text out.

The scrubber removes the sites whose text is sensitive; the gate reports the ones that still are. Both
walk the same list, so a place the scrubber knows how to clean is a place the gate checks. A site carries
the strings it holds (read by pikepdf, never recorded) and a `remove` that deletes or clears that place.

Kinds: "metadata" (Info entries, the XMP packet), "outline" (bookmarks), "destination" (named
destinations), "link" (what a link annotation points at: a destination name, a URI such as mailto:),
"attachment" (embedded files and FileAttachment annotations, their
names, descriptions and decompressed bytes), "javascript" (document scripts, /OpenAction, /AA actions),
"form" (AcroForm field values and their widget appearances), "annotation" (/Contents, /T, rich text and
appearance streams of other annotations), "structure" (/ActualText, /Alt, /E and /T of tagged-PDF
structure elements: what a screen reader speaks).

Every walk (outline items, form fields, structure elements, nested appearance forms) visits each object
once and stays within the parser budgets; streams are read only once their decoded size is known to fit.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pikepdf
from pikepdf import Dictionary, Name

from docjobs.pdf.budgets import DEFAULT_BUDGETS, Budgets, OperatorBudget, array_items, decoded_size, walk
from docjobs.pdf.signatures import form_fields

SITE_KINDS = (
    *("metadata", "outline", "destination", "link", "attachment", "javascript", "form", "annotation", "structure"),
)
MAX_XOBJECT_DEPTH = 8  # nested forms in an appearance stream; deeper is not worth following


@dataclass(frozen=True)
class Site:
    kind: str
    page: int | None  # 1-based page of an annotation; None for document-level places
    texts: tuple[str, ...]
    remove: Callable[[], None]


def document_sites(pdf: pikepdf.Pdf, *, budgets: Budgets = DEFAULT_BUDGETS) -> list[Site]:
    """All text-holding places outside page content, collected before anything is removed."""
    return [
        *_metadata(pdf, budgets),
        *_outlines(pdf, budgets),
        *_name_tree_sites(pdf, "/Dests", "destination", budgets),
        *_old_style_destinations(pdf),
        *_name_tree_sites(pdf, "/EmbeddedFiles", "attachment", budgets),
        *_associated_files(pdf.Root, None, budgets),
        *_name_tree_sites(pdf, "/JavaScript", "javascript", budgets),
        *_document_actions(pdf, budgets),
        *_form_fields(pdf, budgets),
        *_annotations(pdf, budgets),
        *_structure(pdf, budgets),
    ]


def object_text(obj: pikepdf.Object, budgets: Budgets) -> str:
    """The text of a PDF string, name or stream (streams decompressed and read as UTF-8 or Latin-1)."""
    if isinstance(obj, pikepdf.String):
        return str(obj)
    if isinstance(obj, Name):
        return str(obj)[1:]
    if isinstance(obj, pikepdf.Stream):
        try:
            decoded_size(obj, limit=budgets.max_stream_bytes)
            return bytes_text(obj.read_bytes())
        except pikepdf.PdfError:
            return ""
    return ""


def bytes_text(data: bytes) -> str:
    """Bytes read as text every plausible way at once (UTF-16 with a BOM, UTF-8, Latin-1), so a value in an
    attachment is found whichever of them it was written in."""
    if data[:2] in (b"\xfe\xff", b"\xff\xfe"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace") + "\n" + data.decode("latin-1")


def shown_text(stream: pikepdf.Object, budgets: Budgets) -> str:
    """The strings a content stream shows (Tj, TJ, ', "), following its Form XObjects (each once, at most
    MAX_XOBJECT_DEPTH deep, all of them within one operator budget): what an appearance stream puts on
    screen, read well enough for simple fonts."""
    parts: list[str] = []
    operators = OperatorBudget(budgets)
    seen: set[tuple[int, int]] = set()
    pending: list[tuple[pikepdf.Object, int]] = [(stream, 0)]
    while pending:
        current, depth = pending.pop()
        if not isinstance(current, pikepdf.Stream) or depth > MAX_XOBJECT_DEPTH or current.objgen in seen:
            continue
        seen.add(current.objgen)
        parts += _stream_strings(current, operators)
        xobjects = current.get("/Resources", Dictionary()).get("/XObject", Dictionary())
        pending += [(xobject, depth + 1) for _, xobject in reversed(list(xobjects.items()))]
    return "".join(parts)


def _stream_strings(stream: pikepdf.Stream, operators: OperatorBudget) -> list[str]:
    operators.spend(stream)
    try:
        instructions = pikepdf.parse_content_stream(stream)
    except pikepdf.PdfError:
        return []
    parts: list[str] = []
    for instruction in instructions:
        if isinstance(instruction, pikepdf.ContentStreamInlineImage):
            continue
        operands, operator = instruction.operands, instruction.operator
        if str(operator) in ("Tj", "'", '"', "TJ"):
            for operand in operands:
                items = operand if isinstance(operand, pikepdf.Array) else [operand]
                parts += [bytes(item).decode("latin-1") for item in items if isinstance(item, pikepdf.String)]
    return parts


def _metadata(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[Site]:
    info = pdf.trailer.get("/Info")
    if isinstance(info, Dictionary):
        for key in list(info.keys()):
            yield Site("metadata", None, (object_text(info[key], budgets),), _deleter(info, key))
    xmp = pdf.Root.get("/Metadata")
    if isinstance(xmp, pikepdf.Stream):
        # Dropped whole when anything in it matches: rewriting XMP field by field is easy to get wrong.
        yield Site("metadata", None, (html.unescape(object_text(xmp, budgets)),), _deleter(pdf.Root, "/Metadata"))


def _outlines(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[Site]:
    top = _outline_children(pdf.Root.get("/Outlines", Dictionary()))
    for item in walk(top, _outline_children, what="the outline", budgets=budgets):
        if not isinstance(item, Dictionary):
            continue
        texts = (object_text(item.get("/Title", pikepdf.String("")), budgets), *_link_texts(item, budgets))
        yield Site("outline", None, texts, _outline_clearer(item, budgets))


def _outline_children(item: pikepdf.Object) -> list[pikepdf.Object]:
    """An item's first child, then its next sibling. Walked as a tree, a long chain of siblings would be a
    deep one: siblings are therefore read along /Next here, children one level down."""
    if not isinstance(item, Dictionary):
        return []
    children: list[pikepdf.Object] = []
    seen: set[tuple[int, int]] = set()
    child = item.get("/First")
    while isinstance(child, Dictionary) and not (child.is_indirect and child.objgen in seen):
        seen.add(child.objgen)
        children.append(child)
        child = child.get("/Next")
    return children


def _outline_clearer(item: pikepdf.Object, budgets: Budgets) -> Callable[[], None]:
    def clear() -> None:
        item.Title = pikepdf.String("")
        if isinstance(item.get("/Dest"), pikepdf.String | Name):
            del item["/Dest"]  # a named destination: the name may be what matched
        if isinstance(item.get("/A"), Dictionary) and _action_texts(item.A, budgets):
            del item["/A"]  # a script or a jump to a named destination

    return clear


def _link_texts(holder: pikepdf.Object, budgets: Budgets) -> tuple[str, ...]:
    """Named-destination names, URIs and scripts a link, bookmark or action points at."""
    texts: list[str] = []
    dest = holder.get("/Dest")
    if isinstance(dest, pikepdf.String | Name):
        texts.append(object_text(dest, budgets))
    action = holder.get("/A")
    if isinstance(action, Dictionary):
        texts += _action_texts(action, budgets)
    return tuple(texts)


def _action_texts(action: pikepdf.Object, budgets: Budgets) -> list[str]:
    """Script text, URI and destination name of an action and of the actions chained after it (/Next)."""
    texts: list[str] = []
    pending: list[pikepdf.Object] = [action]
    for _ in range(64):  # a /Next chain can loop
        if not pending:
            break
        current = pending.pop()
        if isinstance(current, pikepdf.Array):
            pending += list(current)
            continue
        if not isinstance(current, Dictionary):
            continue
        for key in ("/JS", "/D", "/URI"):
            value = current.get(key)
            if isinstance(value, pikepdf.String | Name | pikepdf.Stream):
                texts.append(object_text(value, budgets))
        if "/Next" in current:
            pending.append(current.Next)
    return texts


def _name_tree_sites(pdf: pikepdf.Pdf, tree_key: str, kind: str, budgets: Budgets) -> Iterator[Site]:
    names = pdf.Root.get("/Names")
    root = names.get(tree_key) if isinstance(names, Dictionary) else None
    if not isinstance(root, Dictionary):
        return
    tree = pikepdf.NameTree(root)
    for key in list(tree.keys()):
        name = key.decode("latin-1") if isinstance(key, bytes) else key
        yield Site(kind, None, (name, *_entry_texts(tree[key], budgets)), _tree_deleter(tree, key))


def _entry_texts(entry: pikepdf.Object, budgets: Budgets) -> list[str]:
    """Texts of a name-tree value: a destination (nothing), a file specification or a script action."""
    if not isinstance(entry, Dictionary):
        return []
    if "/JS" in entry or "/S" in entry:
        return _action_texts(entry, budgets)
    return _filespec_texts(entry, budgets)


def _filespec_texts(spec: pikepdf.Object, budgets: Budgets) -> list[str]:
    if isinstance(spec, pikepdf.String):
        return [str(spec)]
    if not isinstance(spec, Dictionary):
        return []
    texts = [object_text(spec[key], budgets) for key in ("/F", "/UF", "/Desc") if key in spec]
    embedded = spec.get("/EF")
    if isinstance(embedded, Dictionary):
        texts += [object_text(stream, budgets) for _, stream in embedded.items()]
    return texts


def _associated_files(holder: pikepdf.Object, page: int | None, budgets: Budgets) -> Iterator[Site]:
    """The /AF array (PDF 2.0 associated files) also references file specifications: one site per entry."""
    files = holder.get("/AF")
    if isinstance(files, pikepdf.Array):
        for spec in list(files):
            yield Site("attachment", page, tuple(_filespec_texts(spec, budgets)), _array_remover(holder, "/AF", spec))


def _old_style_destinations(pdf: pikepdf.Pdf) -> Iterator[Site]:
    dests = pdf.Root.get("/Dests")
    if isinstance(dests, Dictionary):
        for key in list(dests.keys()):
            yield Site("destination", None, (key[1:],), _deleter(dests, key))


def _document_actions(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[Site]:
    open_action = pdf.Root.get("/OpenAction")
    if isinstance(open_action, Dictionary):
        yield Site("javascript", None, tuple(_action_texts(open_action, budgets)), _deleter(pdf.Root, "/OpenAction"))
    yield from _additional_actions(pdf.Root, None, budgets)


def _additional_actions(holder: pikepdf.Object, page: int | None, budgets: Budgets) -> Iterator[Site]:
    """One site per trigger of an /AA dictionary (document, page, annotation or field)."""
    triggers = holder.get("/AA")
    if isinstance(triggers, Dictionary):
        for key in list(triggers.keys()):
            action = triggers[key]
            if isinstance(action, Dictionary):
                yield Site("javascript", page, tuple(_action_texts(action, budgets)), _deleter(triggers, key))


def _form_fields(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[Site]:
    form = pdf.Root.get("/AcroForm")
    if not isinstance(form, Dictionary):
        return
    for field in form_fields(pdf, budgets=budgets):
        kids = array_items(field.get("/Kids"))
        widgets: list[pikepdf.Object] = [field, *(kid for kid in kids if isinstance(kid, Dictionary))]
        texts = [object_text(field[key], budgets) for key in ("/V", "/DV") if key in field]
        texts.append(_appearance_text(field, budgets))
        yield Site("form", None, tuple(texts), _field_clearer(form, field, widgets))
        yield from _additional_actions(field, None, budgets)


def _field_clearer(form: pikepdf.Object, field: pikepdf.Object, widgets: list[pikepdf.Object]) -> Callable[[], None]:
    """Clear the value, drop the appearances that show it and let the viewer draw them again (empty)."""

    clearers = [_keys_deleter(field, ("/V", "/DV")), *(_deleter(widget, "/AP") for widget in widgets)]

    def clear() -> None:
        for clearer in clearers:
            clearer()
        form.NeedAppearances = True

    return clear


def _appearance_text(annotation: pikepdf.Object, budgets: Budgets) -> str:
    """Text shown by every appearance (normal, rollover, down; every state) of an annotation."""
    appearances = annotation.get("/AP")
    if not isinstance(appearances, Dictionary):
        return ""
    parts: list[str] = []
    for _, entry in appearances.items():
        states = [state for _, state in entry.items()] if isinstance(entry, Dictionary) else [entry]
        parts += [shown_text(state, budgets) for state in states]
    return "".join(parts)


def _annotations(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[Site]:
    for number, page in enumerate(pdf.pages, 1):
        yield from _additional_actions(page.obj, number, budgets)
        yield from _associated_files(page.obj, number, budgets)
        annotations = page.obj.get("/Annots")
        if not isinstance(annotations, pikepdf.Array):
            continue
        for annotation in list(annotations):
            if not isinstance(annotation, Dictionary):
                continue
            yield from _annotation_sites(page.obj, annotation, number, budgets)


def _annotation_sites(
    page: pikepdf.Object, annotation: pikepdf.Object, number: int, budgets: Budgets
) -> Iterator[Site]:
    keys = ("/Contents", "/T", "/RC", "/Subj")
    yield Site(
        "annotation",
        number,
        tuple(object_text(annotation[key], budgets) for key in keys if key in annotation),
        _annotation_text_clearer(annotation, keys),
    )
    if annotation.get("/Subtype") != Name.Widget:  # widgets are cleared with their form field
        yield Site("annotation", number, (_appearance_text(annotation, budgets),), _deleter(annotation, "/AP"))
    if annotation.get("/Subtype") == Name.FileAttachment:
        texts = tuple(_filespec_texts(annotation.FS, budgets)) if "/FS" in annotation else ()
        yield Site("attachment", number, texts, _array_remover(page, "/Annots", annotation))
    dest_texts = _link_texts(annotation, budgets)
    if dest_texts:
        yield Site("link", number, dest_texts, _keys_deleter(annotation, ("/Dest", "/A")))
    yield from _additional_actions(annotation, number, budgets)


def _annotation_text_clearer(annotation: pikepdf.Object, keys: tuple[str, ...]) -> Callable[[], None]:
    clear_keys = _keys_deleter(annotation, keys)

    def clear() -> None:
        clear_keys()
        if annotation.get("/Subtype") == Name.FreeText and "/AP" in annotation:
            del annotation["/AP"]  # it shows the cleared /Contents

    return clear


def _array_remover(holder: pikepdf.Object, key: str, item: pikepdf.Object) -> Callable[[], None]:
    """Take `item` out of the array `holder[key]` (an annotation from /Annots, a file from /AF)."""

    def remove() -> None:
        items = holder.get(key)
        if isinstance(items, pikepdf.Array):
            holder[key] = pikepdf.Array([kept for kept in items if not _same(kept, item)])

    return remove


def _same(a: pikepdf.Object, b: pikepdf.Object) -> bool:
    if a.is_indirect and b.is_indirect:
        return bool(a.objgen == b.objgen)
    return bool(a.unparse() == b.unparse())


def _structure(pdf: pikepdf.Pdf, budgets: Budgets) -> Iterator[Site]:
    root = pdf.Root.get("/StructTreeRoot")
    keys = ("/ActualText", "/Alt", "/E", "/T")
    for element in walk(array_items(root), _structure_kids, what="the structure tree", budgets=budgets):
        if not isinstance(element, Dictionary):
            continue
        texts = tuple(object_text(element[key], budgets) for key in keys if key in element)
        if texts:
            yield Site("structure", None, texts, _keys_deleter(element, keys))


def _structure_kids(element: pikepdf.Object) -> list[pikepdf.Object]:
    return array_items(element.get("/K")) if isinstance(element, Dictionary) else []


def _deleter(holder: pikepdf.Object, key: str) -> Callable[[], None]:
    return _keys_deleter(holder, (key,))


def _keys_deleter(holder: pikepdf.Object, keys: tuple[str, ...]) -> Callable[[], None]:
    def delete() -> None:
        for key in keys:
            if key in holder:
                del holder[key]

    return delete


def _tree_deleter(tree: pikepdf.NameTree, key: str | bytes) -> Callable[[], None]:
    def delete() -> None:
        if key in tree:
            del tree[key]

    return delete
