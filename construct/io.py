"""Safe, reproducible file I/O: ``.npz`` archives and JSON, written atomically.

Archives are written with a fixed timestamp and in sorted key order, so the same arrays give the
same bytes and the same sha256 (``np.savez`` stamps the current time). Every write goes to a
temporary file in the destination folder and is renamed into place, so a failed run never leaves
a half-written file. Reads never unpickle.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .errors import InputError

_EPOCH = (1980, 1, 1, 0, 0, 0)


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The bytes of an uncompressed ``.npz`` holding ``arrays``, independent of time and order."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, payload: bytes) -> None:
    """Write ``payload`` to ``path`` through a temporary file and a rename.

    The file gets the permissions a plain ``open(path, "wb")`` would give (``0o666`` less the
    umask), not the owner-only ones of the temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_outputs(files: Mapping[str, bytes], folder: str | os.PathLike) -> None:
    """Write several files into ``folder``; all payloads must be computed before this is called."""
    for name, payload in files.items():
        write_atomic(Path(folder) / name, payload)


def json_bytes(obj: Any) -> bytes:
    """Indented UTF-8 JSON with a trailing newline."""
    return (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode()


def sha256(payload: bytes) -> str:
    """Hex sha256 of ``payload``."""
    return hashlib.sha256(payload).hexdigest()


def load_npz(path: str | os.PathLike, *, what: str) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` with ``allow_pickle=False``.

    Raises:
        InputError: the file is missing or not an ``.npz``, or an array needs pickle (an object
            array); the message names the file and each offending array.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} file {str(path)!r} does not exist or is not a file", what=f"cannot read {what}")
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as exc:  # np.load raises several unrelated types for a non-archive
        raise InputError(f"{what} file {str(path)!r} is not a readable .npz archive ({exc})",
                         what=f"cannot read {what}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(f"{what} file {str(path)!r} holds a single array, not an .npz archive of named arrays",
                         what=f"cannot read {what}")
    out, problems = {}, []
    with archive:
        for key in archive.files:
            try:
                out[key] = archive[key]
            except ValueError as exc:
                if "pickle" in str(exc).lower():
                    problems.append(f"array {key!r} in {str(path)!r} is an object array, which would need pickle "
                                    "to load; store numbers (float or int arrays) instead")
                else:
                    problems.append(f"array {key!r} in {str(path)!r} cannot be read: {exc}")
            except Exception as exc:
                problems.append(f"array {key!r} in {str(path)!r} cannot be read: {exc}")
    if problems:
        raise InputError(problems, what=f"cannot read {what}")
    return out
