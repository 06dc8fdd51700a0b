"""Safe, reproducible file I/O: ``.npz`` archives and JSON, written atomically.

Archives are written with a fixed timestamp and in sorted key order, so the same arrays give the
same bytes and the same sha256 (``np.savez`` stamps the current time). Every write goes to a
temporary file in the destination folder and is renamed into place, so a failed run never leaves
a half-written file. Reads never unpickle.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import re
import secrets
import shutil
import stat
import zipfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from .errors import InputError, OutputError
from .limits import INFLATION_FLOOR, MAX_INFLATION, available_memory, gib
from .signals import signals_held

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


_CHUNK = 1 << 20


def _write_file(path: Path, payload: bytes, mode: int) -> None:
    """Create ``path`` (it must not exist), write ``payload`` in chunks and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view[:_CHUNK]):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _status(path: Path, kind: Callable[[int], bool]) -> os.stat_result | None:
    """``path``'s status where it is of that kind (``stat.S_ISREG``, ``stat.S_ISDIR``), else None."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st if kind(st.st_mode) else None


def _keep_mode(path: Path, old: os.stat_result | None) -> None:
    """Give ``path`` (a replacement, not yet in place) the group and permission bits of what it
    replaces, as writing into the old file would have kept them. The group goes first, so that a
    setgid bit survives where the user may set it; where the system refuses the group, the
    permissions are still kept (and a setgid bit the kernel drops stays dropped)."""
    if old is None:
        return
    with contextlib.suppress(OSError):
        if path.stat().st_gid != old.st_gid:
            os.chown(path, -1, old.st_gid)
    os.chmod(path, stat.S_IMODE(old.st_mode))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:                                  # some file systems cannot sync a folder
        pass
    finally:
        os.close(fd)


def _os_error(exc: OSError, name: str, folder: Path) -> OutputError:
    reason = exc.strerror or str(exc)
    code = f" [Errno {exc.errno}]" if exc.errno else ""
    return OutputError(f"cannot write {name} into {str(folder)!r}: {reason}{code}; nothing was changed there")


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may be alive (True where that cannot be told, an id too large
    for the system included: its file is then left alone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError, ValueError):
        return True
    return True


def _name_max(path: Path) -> int:
    """The most bytes a name may have where ``path`` goes: its nearest existing folder's
    ``PC_NAME_MAX`` (255 on most file systems, and where the system does not say)."""
    for parent in path.parents:
        try:
            limit = os.pathconf(parent, "PC_NAME_MAX")
        except (OSError, ValueError):
            continue
        return limit if limit > 0 else 255         # −1: no limit stated; 0: some FUSE file systems
    return 255


def _path_max() -> int:
    """The most bytes a path may have, with its terminating NUL (``PC_PATH_MAX``; 4096 on Linux and
    where the system does not say)."""
    try:
        limit = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        return 4096
    return limit if limit > 0 else 4096


def as_path(value, label: str) -> Path:
    """A path argument (``str``, ``bytes`` or ``os.PathLike``) as a :class:`~pathlib.Path`.

    Raises:
        InputError: anything else (``None``, a number, an open file), an empty name (``Path("")``
            is the current folder, ``'.'``), a name holding a NUL character (no system takes
            one), or one longer than the system takes (:func:`_path_max`), naming ``label``.
    """
    if isinstance(value, (str, bytes, os.PathLike)):
        try:
            name = os.fsdecode(value)
        except TypeError:                                   # a PathLike that returns neither
            name = None
        if name == "":
            raise InputError(f"{label}: an empty path names no file or folder", what="invalid arguments")
        if isinstance(name, str) and "\0" not in name:
            size, limit = len(os.fsencode(name)), _path_max()
            if size >= limit:                       # the system says only "[Errno 36] File name too long"
                raise InputError(f"{label}: the path is {size} bytes ({name[:40]!r}…); a path may have at most "
                                 f"{limit - 1} bytes here", what="invalid arguments")
            return Path(name)
        if isinstance(name, str):
            raise InputError(f"{label}: the path {name!r} holds a NUL character", what="invalid arguments")
    raise InputError(f"{label}: expected a path (str, bytes or os.PathLike), got {type(value).__name__}",
                     what="invalid arguments")


def check_names_fit(path: str | os.PathLike, label: str) -> None:
    """Refuse an output path with a name longer than the file system allows (the OS would say
    only "[Errno 36] File name too long").

    Raises:
        InputError: naming ``label``, the name's length and the limit.
    """
    path = as_path(path, label)
    limit = _name_max(path)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > limit:
            shown = f"{part[:24]}…{part[-8:]}" if len(part) > 40 else part
            raise InputError(f"{label}: the name {shown!r} is {size} bytes; a name may have at most {limit} bytes "
                             "here", what="invalid output")


def check_file_target(path: str | os.PathLike, label: str) -> None:
    """Refuse, before any work, a file output that could not be written: ``path`` is a folder,
    the nearest part of it that exists is not a folder (a file where a folder must be), or no
    file can be made in that folder (``/proc``, a read-only mount: a probe file is made there and
    removed).

    Raises:
        InputError: naming ``label`` (the option) and the path.
    """
    path = as_path(path, label)
    check_names_fit(path, label)
    path = _through_link(path, label)
    if path.is_dir():
        raise InputError(f"{label} {str(path)!r} is a folder: name a file", what="invalid output")
    _regular_or_absent(path, label)
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{label} {str(path)!r}: {str(parent)!r} is not a folder", what="invalid output")
            probe = parent / f".{_stem(path.name, parent)}.{os.getpid()}.{secrets.token_hex(4)}.probe"
            try:
                os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except OSError as exc:
                raise InputError(f"{label} {str(path)!r}: no file can be made in {str(parent)!r} "
                                 f"({exc.strerror or exc})", what="invalid output") from None
            finally:
                _discard(probe)                     # (one a kill left is swept by the next writer there)
            return


def _regular_or_absent(path: Path, label: str = "output") -> None:
    """Refuse a target that exists and is not a regular file (a device, a FIFO, a socket): the
    rename would replace it with one, ``/dev/null`` included."""
    try:
        mode = path.stat().st_mode
    except OSError:                                 # absent, or a dangling link: a file is made
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise InputError(f"{label} {str(path)!r} exists and is not a regular file (a device or a pipe): "
                         "name a file", what="invalid output")


def _through_link(path: Path, label: str = "output") -> Path:
    """The file a symbolic link ``path`` names (the whole chain followed), which is what
    ``open(path, "wb")`` writes, and what is then replaced; ``path`` itself otherwise. No folder
    is made through a link: a link into a missing folder is refused."""
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise InputError(f"{label} {str(path)!r} is a link to {str(target)!r}, whose folder does not exist",
                         what="invalid output")
    return target


# Every output put in place (a file renamed over its target, a folder published), in order:
# what the command line names when it is interrupted or runs out of memory after writing.
published: list[str] = []


def write_atomic(path: str | os.PathLike, payload: bytes) -> None:
    """Write ``payload`` to ``path`` through a hidden temporary file and a rename; a symbolic link
    at ``path`` is followed, as ``open`` follows it, and its target replaced.

    The file gets the permissions a plain ``open(path, "wb")`` would give: those of the file it
    replaces (and its group, where the system lets the writer set it), else ``0o666`` less the
    umask. The temporary file's name carries the writer's process id, so a later write to the
    same path removes what a killed writer left behind.

    Raises:
        OutputError: the OS refused (no space, no permission, a folder in the way), naming the
            file and the folder; ``path`` is unchanged, and folders made for it are removed.
        InputError: ``path`` exists and is not a regular file (a device, a FIFO).
    """
    write_atomic_many([(path, payload)])


def write_atomic_many(files: list[tuple[str | os.PathLike, bytes]]) -> None:
    """:func:`write_atomic` for several files as one step: every file is written and flushed to
    a temporary beside its target before the first is renamed into place, so a full disk or a
    refusal leaves every target as it was (and removes the folders made for them). Between the
    renames, a failed rename (its message names the files already replaced), a kill or a power
    loss can leave some replaced and others not.

    Raises:
        OutputError: as :func:`write_atomic`, naming the file that could not be written.
    """
    files = [(_through_link(as_path(path, "output")), payload) for path, payload in files]
    for path, _ in files:
        if path.is_dir():                       # before anything is made there (Path("") is Path("."))
            raise OutputError(f"{str(path)!r} is a folder: name a file to write; nothing was changed there")
        _regular_or_absent(path)
    made: list[Path] = []                       # folders made here, parents first
    written: list[tuple[Path, Path]] = []       # (temporary, target)
    try:
        for path, payload in files:
            try:
                _make_folders(path.parent, made)
                _sweep(path)
                tmp = path.parent / f".{_stem(path.name, path.parent)}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
                written.append((tmp, path))
                _write_file(tmp, payload, 0o666 & ~_umask())
                _keep_mode(tmp, _status(path, stat.S_ISREG))
                if path.is_dir():
                    raise IsADirectoryError(21, "a folder of that name is in the way")
            except OSError as exc:
                raise _os_error(exc, path.name, path.parent) from None
        for i, (tmp, path) in enumerate(written):
            try:
                os.replace(tmp, path)
                published.append(str(path))
            except OSError as exc:
                if i == 0:
                    raise _os_error(exc, path.name, path.parent) from None
                done = ", ".join(str(p) for _, p in written[:i])
                raise OutputError(f"cannot write {path.name} into {str(path.parent)!r}: {exc.strerror or exc}; "
                                  f"{done} {'was' if i == 1 else 'were'} already replaced, the rest was not "
                                  "written") from None
    except BaseException:
        for tmp, _ in written:
            _discard(tmp)
        for folder in reversed(made):
            try:
                folder.rmdir()                  # only if still empty: never another writer's files
            except OSError:
                pass
        raise


def _sweep(path: Path) -> None:
    """Remove what killed writers of ``path`` left beside it: ``.NAME.PID.HEX.tmp`` and
    ``.NAME.PID.HEX.probe`` files whose process is gone (the exact pattern: another target's
    ``.NAME.99.…`` is not one of them)."""
    stem = _stem(path.name, path.parent)
    pattern = re.compile(rf"\.{re.escape(stem)}\.(\d{{1,10}})\.[0-9a-f]+\.(tmp|probe)")
    for old in _siblings(path.parent, f".{stem}."):
        m = pattern.fullmatch(old.name)
        if m and not _pid_alive(int(m.group(1))):
            _discard(old)


def _make_folders(folder: Path, made: list[Path]) -> None:
    """Make ``folder`` and its missing parents, appending each one made to ``made`` as soon as
    it is (a folder another writer made meanwhile is not counted)."""
    missing = []
    for p in [folder, *folder.parents]:
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            continue
        made.append(p)


def _discard(path: Path) -> None:
    """Remove ``path`` if it is there. Where it cannot be (a read-only file system refuses even
    to remove what was never made, with EROFS), the error being reported is the one to keep."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _siblings(folder: Path, prefix: str) -> list[Path]:
    """Entries of ``folder`` whose names start with ``prefix`` (taken literally, not as a glob)."""
    try:
        return [folder / name for name in os.listdir(folder) if name.startswith(prefix)]
    except OSError:
        return []


# What the hidden names beside a target add to its name: at most ".{stem}.mha-construct-{pid}-{hex}"
# (OutputFolder's staging folder; a Linux pid has at most 7 digits), one byte to spare.
_HIDDEN_EXTRA = 33


def _stem(name: str, folder: Path) -> str:
    """``name`` as the hidden files beside it carry it: itself, or where that would pass the most
    bytes a name may have in ``folder`` (255 on most file systems), its first bytes (whole
    characters) then ``~`` and 16 hex digits of its SHA-256, which keeps it apart from other
    names with the same beginning."""
    name_max = _name_max(folder / "name")
    raw = os.fsencode(name)
    room = name_max - _HIDDEN_EXTRA
    if len(raw) <= room:
        return name
    head = os.fsdecode(raw[:max(room - 17, 0)].decode("utf-8", "ignore").encode("utf-8"))
    return f"{head}~{hashlib.sha256(raw).hexdigest()[:16]}"


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system or the file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _no_dangling_link(path: Path, named) -> None:
    """Refuse a folder path that passes through a link to something that does not exist: no
    folder is made through a link. The path is resolved as ``realpath`` resolves it (a link
    followed where it is met, ``..`` taken after it), link by link, so that each link it would
    follow is looked at (as text, ``dangling/../run`` and ``missing/../dangling/run`` hid it)."""
    resolved = Path(os.path.abspath(os.sep if path.is_absolute() else os.curdir))
    for name in path.parts[1:] if path.is_absolute() else path.parts:
        if name in ("", "."):
            continue
        if name == "..":
            resolved = resolved.parent
            continue
        step = resolved / name
        if os.path.islink(step):                         # (False on any OSError: named later)
            if not os.path.exists(step):
                raise InputError(f"output folder {str(named)!r}: {str(step)!r} is a link to "
                                 f"{os.path.realpath(step)!r}, which does not exist; make that folder or "
                                 "name another", what="invalid output folder")
            step = Path(os.path.realpath(step))
        resolved = step


class OutputFolder:
    """A folder whose files are replaced as one set, or not at all.

    Use as a context manager around the work that produces the files, then :meth:`publish` them:

    - on entry it takes a lock beside the folder (``.NAME.mha-construct.lock``, an advisory
      ``flock``, released by the kernel if the process dies; a NAME near the file system's limit
      is cut and given a digest, :func:`_stem`), so a second writer is refused at
      once; it removes what killed writers left (hidden ``.NAME.mha-construct-PID-HEX`` and
      ``-PID-old`` folders, those exact names only); and
      it refuses a folder holding files other than ``names`` unless ``force``;
    - :meth:`publish` writes every file into a hidden sibling folder, flushes it to disk, and
      swaps it with the folder in one atomic step (``renameat2(RENAME_EXCHANGE)``; where the
      system lacks it, two renames, between which the folder is briefly absent), then removes the
      old set. At every moment, also after a kill, the folder holds the complete old set or the
      complete new set; ``force`` replaces its whole content. The new folder keeps the old one's
      permissions and group (a private folder stays private).

    Raises:
        InputError: the path is not a folder, another process is writing it, or it holds other
            files (without ``force``).
        OutputError: the OS refused a step (no space, no permission), naming the file and folder.
    """

    def __init__(self, folder: str | os.PathLike, names, *, force: bool = False):
        given = as_path(folder, "output folder")
        _no_dangling_link(given, folder)
        self.folder = Path(os.path.realpath(given))
        self.names = frozenset(names)
        self.force = force
        self._lock: int | None = None
        self._lock_path: Path | None = None
        self._created: list[Path] = []

    @property
    def _hidden(self) -> str:
        return f".{_stem(self.folder.name, self.folder.parent)}.mha-construct"

    def __enter__(self) -> OutputFolder:
        folder, parent = self.folder, self.folder.parent
        check_names_fit(folder, "output folder")
        try:
            here = Path(os.path.realpath(os.getcwd()))
        except OSError:                              # the current folder is gone: nothing to keep
            here = None
        if here is not None and (folder == here or folder in here.parents):
            raise InputError(f"{str(folder)!r} is the current folder or holds it: its content is replaced as a "
                             "whole (the process would be left in a removed folder); choose a folder of its own",
                             what="invalid output folder")
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{str(folder)!r} exists and is not a folder", what="invalid output folder")
        if folder.is_dir() and not folder.stat().st_mode & stat.S_IWUSR:
            # Its owner took write permission away: a sign to leave it alone (and its old set,
            # once replaced, could not be removed).
            raise InputError(f"{str(folder)!r} is write-protected; make it writable (chmod u+w) or choose another "
                             "folder", what="output folder protected")
        try:
            _make_folders(parent, self._created)            # (one a concurrent writer made is not ours)
            self._take_lock()
        except OSError as exc:
            self._undo()
            raise _os_error(exc, folder.name, parent) from None
        except BaseException:                                # Ctrl-C: the folders made go too
            self._undo()
            raise
        try:
            leftovers = self._leftovers()                            # of killed writers
            olds = [p for p in leftovers if p.name.endswith("-old")]
            if not folder.exists() and olds:
                # killed between the two renames of the fallback: the old set comes back
                os.rename(olds[0], folder)
                leftovers.remove(olds[0])
            for old in leftovers:
                shutil.rmtree(old, ignore_errors=True)
            if folder.is_dir() and not self.force:
                # The command's names are files: a folder under one of them is the user's.
                with os.scandir(folder) as entries:
                    foreign = sorted(e.name for e in entries
                                     if e.name not in self.names or e.is_dir(follow_symlinks=False))
                if foreign:
                    shown = ", ".join(foreign[:10]) + (f", … ({len(foreign)} in all)" if len(foreign) > 10 else "")
                    raise InputError(f"{str(folder)!r} holds files a build does not write ({shown}); "
                                     "choose another folder, move them, or pass --force (force=True in "
                                     "Python) to replace the folder's whole content", what="output folder in use")
        except BaseException:
            self._undo()
            raise
        return self

    def _leftovers(self) -> list[Path]:
        """What killed writers of this folder left beside it: staging folders
        ``.NAME.mha-construct-PID-HEX`` and old sets ``.NAME.mha-construct-PID-old`` (the exact
        pattern: a folder of the user's with another name after the prefix is theirs). Whatever
        their process id: the lock is held, so no writer of this folder is at work, and ids are
        reused (every container run may be PID 1)."""
        pattern = re.compile(rf"{re.escape(self._hidden)}-\d{{1,10}}-([0-9a-f]{{8}}|old)")
        return [path for path in _siblings(self.folder.parent, f"{self._hidden}-")
                if pattern.fullmatch(path.name) and path.is_dir() and not path.is_symlink()]

    def _take_lock(self) -> None:
        path = self.folder.parent / f"{self._hidden}.lock"
        while True:
            try:                                   # never through a link planted there (a shared /tmp)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.EMLINK):      # (a link: ELOOP, EMLINK on BSD)
                    raise
                raise InputError(f"the lock file {str(path)!r} of {str(self.folder)!r} is a link or a folder "
                                 f"({exc.strerror or exc}): remove it, or choose another folder",
                                 what="invalid output folder") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise InputError(f"{str(self.folder)!r} is being written by another mha-construct process "
                                 f"(it holds {path.name}); wait for it, or choose another folder",
                                 what="output folder busy") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:                                  # not a lock file its last holder just removed
                self._lock, self._lock_path = fd, path
                return
            os.close(fd)

    def publish(self, files: Mapping[str, bytes]) -> None:
        """Replace the folder's content with ``files`` (name → bytes), atomically as a set."""
        folder, parent = self.folder, self.folder.parent
        stage = parent / f"{self._hidden}-{os.getpid()}-{secrets.token_hex(4)}"
        name = folder.name
        try:
            try:
                os.mkdir(stage)
                for name, payload in files.items():
                    _write_file(stage / name, payload, 0o666 & ~_umask())
                    _keep_mode(stage / name, _status(folder / name, stat.S_ISREG))   # as the folder's own
                name = folder.name
                _keep_mode(stage, _status(folder, stat.S_ISDIR))   # a private folder stays private
                _fsync_dir(stage)
            except BaseException:                    # Ctrl-C too: the staged files go
                shutil.rmtree(stage, ignore_errors=True)
                raise
            with signals_held():                     # the set replaced, and said so, or not at all
                try:
                    if folder.is_dir():
                        if not _exchange(stage, folder):
                            old = parent / f"{self._hidden}-{os.getpid()}-old"
                            os.rename(folder, old)
                            try:
                                os.rename(stage, folder)
                            except OSError:
                                os.rename(old, folder)               # put the old set back
                                raise
                            stage = old
                        shutil.rmtree(stage, ignore_errors=True)     # the old set
                    else:
                        os.rename(stage, folder)
                except OSError:
                    shutil.rmtree(stage, ignore_errors=True)
                    raise
                published.append(str(folder))
            _fsync_dir(parent)
        except OSError as exc:
            raise _os_error(exc, name, folder) from None
        self._created.clear()

    def _undo(self) -> None:
        if self._lock is not None:
            self._lock_path.unlink(missing_ok=True)      # still held: no one else can be using it
            os.close(self._lock)
            self._lock = None
        for p in reversed(self._created):                 # folders made for an output never written
            with contextlib.suppress(OSError):
                p.rmdir()
        self._created.clear()

    def __exit__(self, *exc) -> None:
        self._undo()


def json_bytes(obj: Any) -> bytes:
    """Indented UTF-8 JSON with a trailing newline; a non-finite number is written as ``null``
    (JSON has no infinity or NaN)."""
    return (json.dumps(_finite(obj), indent=2, sort_keys=False, allow_nan=False) + "\n").encode()


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def sha256(payload: bytes) -> str:
    """Hex sha256 of ``payload``."""
    return hashlib.sha256(payload).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of the file at ``path``, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike):
    """Hold, for the block, the lock :class:`OutputFolder` takes on ``folder`` (an existing
    folder): a writer of one file into a build's folder is refused while a build writes it.
    Where no lock file can be made beside the folder (no permission, a read-only file system),
    no build can be writing it, and the block runs without one.

    Raises:
        InputError: another process holds it.
        OutputError: the lock file cannot be made.
    """
    out = OutputFolder(folder, ())
    try:
        out._take_lock()
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            yield                      # no lock file can be made there, so no build is writing it
            return
        raise _os_error(exc, f"{out._hidden}.lock", out.folder.parent) from None
    try:
        yield
    finally:
        out._undo()


def load_npz(path: str | os.PathLike, *, what: str, allowed, other: tuple[str, Callable] | None = None,
             holds: str = "") -> dict[str, np.ndarray]:
    """Read the arrays of an ``.npz`` (never unpickles), sizing them before inflating anything.

    Args:
        path: the archive.
        what: what it holds, for messages (``"dataset"``, ``"weights"``).
        allowed: a predicate on array names, ``allowed(name) -> bool``; any other member is
            refused before a byte of it is read.
        other: the other kind of file a user may give in its place, as ``(sentence, predicate)``:
            when every member's name meets the predicate, the message says the sentence and asks
            whether the files were given the other way round.
        holds: the arrays such a file holds, for the message on an unexpected one.

    Every member's ``.npy`` header is read first: an object dtype (it would need pickle), a
    declared size that differs from the header's shape, arrays that together exceed the memory
    available, or a compressed member that inflates more than :data:`construct.limits.MAX_INFLATION`
    times (beyond :data:`construct.limits.INFLATION_FLOOR` bytes) are refused by name.

    Raises:
        InputError: the file is missing or not an ``.npz`` archive, or any problem above; the
            message names the file and each offending array.
    """
    path = as_path(path, f"{what} file")
    cannot = f"cannot read {what}"
    try:
        is_file = path.is_file()
    except OSError:                                   # a name too long, say
        is_file = False
    if not is_file:
        raise InputError(f"{what} file {str(path)!r} does not exist or is not a file", what=cannot)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InputError(f"{what} file {str(path)!r} is not a readable .npz archive ({exc})", what=cannot) from None
    with archive:
        infos = archive.infolist()
        problems = []
        for info in infos:
            key = info.filename[:-4] if info.filename.endswith(".npy") else None
            if key is None or not allowed(key):
                problems.append(f"unexpected member {info.filename!r} in {str(path)!r}"
                                + (f" ({holds})" if holds else ""))
        if len({i.filename for i in infos}) < len(infos):
            problems.append(f"{str(path)!r} holds the same array name twice")
        names = [i.filename[:-4] for i in infos if i.filename.endswith(".npy")]
        if problems and other is not None and names and all(other[1](k) for k in names):
            # Every member is the other kind's: naming each as unexpected adds nothing to this.
            problems = [f"{str(path)!r}: {other[0]}: were the files given the other way round?",
                        *(p for p in problems if not p.startswith("unexpected member"))]
        if problems:
            raise InputError(problems, what=f"{cannot} (no array was loaded)")
        total = 0
        for info in infos:
            key = info.filename[:-4]
            try:
                nbytes, converted = _member_size(archive, info)
            except ValueError as exc:
                problems.append(f"array {key!r} in {str(path)!r}: {exc}")
                continue
            total += nbytes + converted
            if (info.compress_type != zipfile.ZIP_STORED and nbytes > INFLATION_FLOOR
                    and nbytes > MAX_INFLATION * max(info.compress_size, 1)):
                problems.append(f"array {key!r} in {str(path)!r} inflates from {gib(info.compress_size)} to "
                                f"{gib(nbytes)}, more than {MAX_INFLATION}x (a decompression bomb?); if it is "
                                "genuine, save it uncompressed (numpy.savez)")
        free = available_memory()
        if not problems and total > free:
            problems.append(f"the arrays of {str(path)!r} need {gib(total)} of memory; {gib(free)} is available")
        if problems:
            raise InputError(problems, what=f"{cannot} (no array was loaded)")
        out = {}
        for info in infos:
            key = info.filename[:-4]
            try:
                with archive.open(info) as fh:
                    out[key] = np.lib.format.read_array(fh, allow_pickle=False)
            except Exception as exc:      # zlib, CRC and format errors come in several types
                problems.append(f"array {key!r} in {str(path)!r} cannot be read: {exc}")
    if problems:
        raise InputError(problems, what=cannot)
    return out


def _member_size(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[int, int]:
    """Bytes of the array an ``.npy`` member holds, from its header alone, and of the float64
    copy validation makes of an array of another dtype (0 for float64).

    Raises:
        ValueError: not an ``.npy`` header, an object dtype, or a declared size that differs.
    """
    # Hostile bytes reach zipfile and numpy's header parser, which refuse them in many types:
    # NotImplementedError (a compression method), RuntimeError (an encrypted member),
    # tokenize.TokenError (an unbalanced header), besides ValueError and OSError.
    try:
        with archive.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                raise ValueError(f".npy format version {version} is not supported")
            header = fh.tell()
    except Exception as exc:
        raise ValueError(f"not a readable .npy array ({type(exc).__name__}: {exc})") from None
    if dtype.hasobject:
        raise ValueError("an object array, which would need pickle to load; store numbers (float or int arrays)")
    if any(not isinstance(n, int) or n < 0 for n in shape):
        raise ValueError(f"its header declares the shape {shape!r}, with a negative size: a damaged or forged archive")
    nbytes = math.prod(shape) * dtype.itemsize
    if info.file_size != header + nbytes:
        declared, held = gib(nbytes), gib(max(info.file_size - header, 0))
        if declared == held:                         # a few bytes apart: the bytes themselves
            declared, held = f"{nbytes:,} bytes", f"{info.file_size - header:,} bytes"
        raise ValueError(f"its header declares {declared} of data but the member holds {held}: a damaged or "
                         "forged archive")
    return nbytes, 0 if dtype == np.float64 else 8 * math.prod(shape)
