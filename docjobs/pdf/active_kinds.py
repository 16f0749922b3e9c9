"""What counts as active content, as plain data: the names both walks over a document share.

`docjobs/pdf/sanitize.py` (pikepdf: it strips, in render) and `docjobs/pdf/active_walk.py` (pypdf: it only
counts, in the release gate's own sandbox, which must not load a C/C++ PDF parser) judge the same actions and
annotations by these tables, within the same budget, so that the gate refuses exactly what sanitization would
have removed. This module imports nothing but the standard library and the domain's errors: see sanitize.py's
docstring for what each kind means.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from docjobs.domain.errors import DocJobError, FailureCode

MAX_NODES = 500_000  # objects one pass may visit: far above real documents, bounded for hostile ones


class WalkBudget:
    """How many more objects a walk over a document may visit (input.too_complex beyond)."""

    def __init__(self, nodes: int) -> None:
        self.left = nodes

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise DocJobError(
                FailureCode.INPUT_TOO_COMPLEX, "the input has too many objects to check for active content"
            )


ACTIVE_ACTIONS = {
    "/JavaScript": "javascript",
    "/Launch": "launch",
    "/SubmitForm": "submit_form",
    "/ImportData": "import_data",
    "/GoToR": "goto_remote",
    "/GoToE": "goto_remote",
    "/RichMediaExecute": "rich_media",
    "/GoTo3DView": "rich_media",
    "/Rendition": "media",
    "/Movie": "media",
    "/Sound": "media",
    "/SetOCGState": "visibility",
    "/Hide": "visibility",
}
INERT_ACTIONS = frozenset(("/GoTo", "/URI", "/Named", "/Thread", "/ResetForm", "/Trans"))
ACTIVE_ANNOTATIONS = {
    "/RichMedia": "rich_media",
    "/3D": "rich_media",
    "/Screen": "media",
    "/Movie": "media",
    "/Sound": "media",
}
URI_SCHEMES = {b"javascript": "javascript", b"vbscript": "javascript", b"file": "launch"}
_SCHEME = re.compile(rb"([a-z][a-z0-9+.-]*):", re.IGNORECASE)


def uri_kind(uri: bytes) -> str | None:
    """The kind of active content a URI action's target is (`javascript:`, `file:`), or None for the web."""
    # Viewers and browsers ignore whitespace and control characters inside a scheme ("java\tscript:").
    scheme = _SCHEME.match(bytes(c for c in uri if c > 0x20))
    return URI_SCHEMES.get(scheme.group(1).lower()) if scheme else None


NOT_A_NAME = ""  # an action's /S that is not a name: an action of no type a viewer knows


def action_kind_of(subtype: str | None, *, has_js: bool, remote: bool, uri: Callable[[], str | None]) -> str | None:
    """The kind of active content an action is, or None when it is inert, from its parts as either reader sees
    them: whether it has /JS, its type (/S's name; None without one, NOT_A_NAME when it is no name), whether it
    names another file (/F, for /Thread) and its URI's kind (`uri`, read only for a /URI action)."""
    if has_js:
        return "javascript"
    if subtype is None:
        return None  # no action type: nothing for a viewer to do
    if subtype in ACTIVE_ACTIONS:
        return ACTIVE_ACTIONS[subtype]
    if subtype not in INERT_ACTIONS:
        return "other_action"
    if subtype == "/URI":
        return uri()
    if subtype == "/Thread" and remote:
        return "goto_remote"
    return None
