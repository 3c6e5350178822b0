"""The on-disk discipline of every cache vkcore keeps (SPIR-V, pipeline, tune).

One place for: private folders (mode 0700), a folder lock, atomic writes through a
fsynced temp file, the removal of temp files a dead writer left, digests, and the checks
made before a file's bytes are used at all:

* the path is a regular file no larger than a cap (refused unread otherwise);
* on POSIX, the file is owned by this process's effective uid, and the folder holding it
  is owned by this uid or root and is not writable by group or others unless it has the
  sticky bit. A digest protects against damage, not against another user: under a
  shared ``/tmp`` another user could otherwise plant an entry with a valid digest.

Windows has no uids and no meaningful mode bits, so the ownership checks are skipped
there (``OWNER_CHECKS`` is False). Nothing here is POSIX-only: the folder lock is the
``filelock`` package's (``flock`` on POSIX, ``msvcrt.locking`` on Windows, a lock file
where neither exists), imported at the first write, and a lock that stays taken for
``LOCK_TIMEOUT`` seconds is an OSError like any unwritable folder (callers warn and run
without persistence), never a hang. On Windows ``os.replace`` fails while another process
has the target open (a reader): it is retried for up to about a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("vkcore")

TEMP_PREFIX = ".tmp-"
LOCK_NAME = ".lock"
PRIVATE_MODE = 0o700
OWNER_CHECKS = hasattr(os, "geteuid")
LOCK_TIMEOUT = 60.0  # seconds; a writer holds the lock for one merge and write
# Windows refuses os.replace onto a file another process has open; POSIX never does.
REPLACE_RETRIES = 20 if os.name == "nt" else 0
REPLACE_WAIT = 0.05


class EntryError(ValueError):
    """A cache file is damaged, too large, not a file, or not trusted."""


class FolderUntrusted(EntryError):
    """The folder holding a cache file is not trusted (one warning per folder suffices)."""

    def __init__(self, folder: Path, why: str) -> None:
        super().__init__(f"not trusted: {why}")
        self.folder = str(folder)


_warned_folders: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def warn_once_per_folder(folder: Path | str, kind: str, message: str, *args: object) -> None:
    """``log.warning(message % args)`` the first time this process reports ``kind`` of
    trouble with ``folder``; later ones go to the debug log. A folder that cannot be
    trusted or written stays so for every file in it: one warning says it."""
    key = (str(folder), kind)
    with _warned_lock:
        first = key not in _warned_folders
        _warned_folders.add(key)
    (log.warning if first else log.debug)(message, *args)


def report(exc: EntryError, message: str, *args: object) -> None:
    """The one warning for a rejected entry: ``message % args`` (which should name the
    entry and ``exc``), except that an untrusted folder is warned about once per process."""
    if isinstance(exc, FolderUntrusted):
        warn_once_per_folder(exc.folder, "untrusted", message, *args)
    else:
        log.warning(message, *args)


def sha256(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.digest()


def _euid() -> int:
    return os.geteuid()


def make_private_dir(folder: Path) -> None:
    """Create ``folder`` and every missing parent with mode 0700 (existing ones are left
    as they are; the trust checks judge them when a file is read)."""
    missing = []
    here = Path(folder)
    while not here.exists():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, PRIVATE_MODE)
        except FileExistsError:
            continue
        with contextlib.suppress(OSError):
            os.chmod(path, PRIVATE_MODE)  # a umask may have removed the owner's own bits


def folder_problem(folder: Path) -> str | None:
    """Why files in ``folder`` must not be trusted, or None."""
    if not OWNER_CHECKS:
        return None
    try:
        st = os.stat(folder)
    except OSError as exc:
        return f"cannot stat its folder ({exc.strerror or exc})"
    if st.st_uid not in (_euid(), 0):
        return f"its folder {folder} is owned by uid {st.st_uid}, not this user (uid {_euid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return (
            f"its folder {folder} can be written by other users "
            f"(mode {stat.S_IMODE(st.st_mode):o}, no sticky bit)"
        )
    return None


def owner_problem(st: os.stat_result) -> str | None:
    """Why a file with status ``st`` must not be trusted, or None."""
    if OWNER_CHECKS and st.st_uid != _euid():
        return f"owned by uid {st.st_uid}, not this user (uid {_euid()})"
    return None


def read_entry(path: Path, cap: int, *, cap_name: str = "", trust: bool = True) -> bytes:
    """The bytes of a cache file, after the checks above (``trust`` False skips the
    ownership checks: files shipped inside the package are as trusted as its code).

    Raises :class:`EntryError` saying why, ``FileNotFoundError`` when there is no file.
    """
    try:
        fd = _open_for_reading(path)
    except FileNotFoundError:
        raise
    except NotADirectoryError:  # a file where a folder should be: there is no entry
        raise FileNotFoundError(2, "no such entry", str(path)) from None
    except OSError as exc:
        raise EntryError(f"cannot read: {exc.strerror or exc}") from None
    suffix = f" ({cap_name})" if cap_name else ""
    try:
        st = os.fstat(fd)  # the file that was opened, not what the name points to now
        _check_opened(path, st, cap, trust, suffix)
        data = _read_opened(fd, cap + 1)
    except OSError as exc:
        raise EntryError(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise EntryError(f"grew above the cap of {cap} bytes while being read{suffix}")
    return data


def _open_for_reading(path: Path) -> int:
    # non-blocking: a FIFO in the entry's place must not hang the process
    return os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))


def _read_opened(fd: int, limit: int) -> bytes:
    with os.fdopen(fd, "rb", closefd=False) as fh:
        return fh.read(limit)


def _check_opened(path: Path, st: os.stat_result, cap: int, trust: bool, suffix: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise EntryError("not a regular file")
    if trust and (problem := folder_problem(path.parent)) is not None:
        raise FolderUntrusted(path.parent, problem)
    if trust and (problem := owner_problem(st)) is not None:
        raise EntryError(f"not trusted: {problem}")
    if st.st_size > cap:
        raise EntryError(f"{st.st_size} bytes is above the cap of {cap} bytes{suffix}")


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder/.lock``, shared by every process and thread using the
    folder; :class:`filelock.Timeout` (an OSError) after ``LOCK_TIMEOUT`` seconds."""
    import filelock  # here, not at import: only writes need it

    with filelock.FileLock(os.fspath(Path(folder) / LOCK_NAME), timeout=LOCK_TIMEOUT, mode=0o600):
        yield


def is_temp(path: Path) -> bool:
    return path.name.startswith(TEMP_PREFIX)


def remove_stale_temps(folder: Path) -> int:
    """Remove temp files left by a writer that died; call only while holding
    :func:`folder_lock` (every write happens under it, so any temp file found then is stale)."""
    removed = 0
    for path in folder.glob(TEMP_PREFIX + "*"):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            path.unlink()
            removed += 1
    if removed:
        log.info("removed %d temp file(s) left by an interrupted write in %s", removed, folder)
    return removed


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fsynced temp file (mode 0600) in the same folder
    and ``os.replace``; the temp file is removed if anything fails. Call under the lock."""
    fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=_suffix(path), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError, AttributeError):  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _replace(temp: str, path: Path) -> None:
    """``os.replace``, retried on PermissionError where a reader may hold the target open."""
    for attempt in range(REPLACE_RETRIES + 1):
        try:
            os.replace(temp, path)
            return
        except PermissionError:
            if attempt == REPLACE_RETRIES:
                raise
            time.sleep(REPLACE_WAIT)


def store(path: Path, data: bytes) -> None:
    """Create the folder (private), then under its lock remove stale temp files and write
    ``path`` atomically. Raises OSError; callers decide how to warn."""
    make_private_dir(path.parent)
    with folder_lock(path.parent):
        remove_stale_temps(path.parent)
        write_atomic(path, data)


def _suffix(path: Path) -> str:
    name = path.name
    return name[name.index(".") :] if "." in name else ""


def remove_entry(path: Path) -> None:
    """Remove a cache entry whatever it has become: a file, a link, or a folder in its place."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
