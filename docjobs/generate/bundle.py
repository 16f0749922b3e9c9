"""A zip bundle unpacked into the job's folder, with limits.

A bundle is hostile: its names may climb out of the folder (`../`, absolute paths), its entries may be links
or special files, it may be a zip bomb. Only regular files and folders are written, each strictly inside the
destination and never over one another; the bytes written (not the sizes the zip claims) and the number of
entries are capped. Acceptance only checked its size and magic: this is the first code that opens it.
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path, PurePosixPath

from docjobs.domain.errors import DocJobError, FailureCode

CHUNK = 1024 * 1024
INDEX = "index.html"  # the page a bundle (or a template) starts from, at its top


def _target(dest: Path, name: str) -> Path:
    """Where entry `name` goes: inside `dest`, or the bundle is refused."""
    path = PurePosixPath(name)
    if "\\" in name or path.is_absolute() or any(part in ("..", "") for part in path.parts) or not path.parts:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the bundle has an entry whose name leads outside its folder")
    target = dest.joinpath(*path.parts)
    if not target.resolve().is_relative_to(dest.resolve()):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the bundle has an entry whose name leads outside its folder")
    return target


def unpack_bundle(archive: Path, dest: Path, *, max_bytes: int, max_files: int) -> Path:
    """Unpack `archive` into the (empty) folder `dest`; returns its `index.html`.

    Raises DocJobError: input.malformed (not a readable zip, an entry outside the folder, a link or special file,
    two entries of one name, no index.html) or input.too_large (more entries or bytes than allowed)."""
    dest.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        with zipfile.ZipFile(archive) as bundle:
            members = bundle.infolist()
            if len(members) > max_files:
                raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the bundle has more than {max_files} entries")
            for member in members:
                target = _target(dest, member.filename)
                kind = stat.S_IFMT(member.external_attr >> 16)
                if member.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if kind and kind != stat.S_IFREG:
                    raise DocJobError(FailureCode.INPUT_MALFORMED, "the bundle holds a link or a special file")
                target.parent.mkdir(parents=True, exist_ok=True)
                with bundle.open(member) as source, target.open("xb") as out:  # "x": no entry overwrites another
                    while chunk := source.read(CHUNK):
                        written += len(chunk)
                        if written > max_bytes:
                            raise DocJobError(
                                FailureCode.INPUT_TOO_LARGE, f"the bundle unpacks to more than {max_bytes} bytes"
                            )
                        out.write(chunk)
    except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError, ValueError):
        # not a zip, truncated, an unknown compression method, encrypted entries
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the bundle is not a readable zip file") from None
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the bundle has two entries of the same name") from None
    index = dest / INDEX
    if not index.is_file():
        raise DocJobError(FailureCode.INPUT_MALFORMED, f"the bundle has no {INDEX} at its top")
    return index
