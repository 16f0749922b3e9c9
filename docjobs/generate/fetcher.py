"""The only way WeasyPrint reaches a resource: `data:` URIs and regular files inside the job's own folder.

Nothing leaves the machine (no http, https, ftp, ...: no request is ever made, so no redirect either), and no
file outside the folder is read (`file://` anywhere else, links, devices and pipes are refused: the folder
is the unpacked bundle and holds regular files only). A refused resource is counted by kind and left out;
the caller decides, by policy, whether that fails the job. No URL is kept or logged.
"""

from __future__ import annotations

import mimetypes
import os
import stat
from collections import Counter
from pathlib import Path
from typing import NoReturn
from urllib.parse import unquote, urlsplit

from weasyprint.urls import URLFetcher, URLFetcherResponse


class ResourceRefused(ValueError):
    """WeasyPrint leaves the resource out (it catches every fetch error but the fatal one)."""


class BundleFetcher(URLFetcher):  # type: ignore[misc]  # weasyprint ships no type hints
    def __init__(self, root: Path) -> None:
        super().__init__(allowed_protocols=("data", "file"), allow_redirects=False, fail_on_errors=False)
        self.root = root.resolve()
        self.refused: Counter[str] = Counter()  # kind -> resources refused

    def fetch(self, url: str, headers: dict[str, str] | None = None) -> URLFetcherResponse:
        scheme = url.partition(":")[0].lower() if ":" in url else ""
        if scheme == "data":
            return super().fetch(url, headers)  # decoded in memory by urllib's data handler: no I/O
        if scheme == "file":
            return self._bundle_file(url)
        self._refuse("http" if scheme in ("http", "https") else "scheme")

    def _bundle_file(self, url: str) -> URLFetcherResponse:
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            self._refuse("file")
        path = Path(os.path.normpath(unquote(parts.path)))
        if not path.is_absolute() or not path.is_relative_to(self.root):
            self._refuse("file")
        try:
            resolved = path.resolve(strict=True)
            descriptor = os.open(resolved, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            self._refuse("missing")
        if not resolved.is_relative_to(self.root) or not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            self._refuse("file")
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return URLFetcherResponse(url, body=os.fdopen(descriptor, "rb"), headers={"Content-Type": content_type})

    def _refuse(self, kind: str) -> NoReturn:
        self.refused[kind] += 1
        raise ResourceRefused(f"refused a resource ({kind})")
