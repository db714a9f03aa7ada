"""Files written whole, atomically (temporary file, fsync, rename: a crash leaves the old or
the new file, never a mix), and an exclusive lock on an output folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Self

from dataflex_rl.core.registry import ConfigError

LOCK_FILE = ".lock"


def require_empty_dir(path: str | Path, what: str, force: bool = False) -> Path:
    """``path`` as a `Path` when it is missing or empty, or ``force`` is set; else a
    ConfigError (``what`` names the command) listing the first files."""
    target = Path(path)
    present = sorted(p.name for p in target.iterdir()) if target.is_dir() else []
    if present and not force:
        raise ConfigError(
            f"{what}: {target} already holds {', '.join(present[:5])}"
            f"{' ...' if len(present) > 5 else ''}; choose an empty directory or pass --force"
        )
    return target


def fsync_dir(directory: str | Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where unsupported."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durable(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and flush it to disk (not atomic by itself: for files in a
    temporary folder that is renamed into place afterwards)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path next to ``path``; on success it is fsynced and renamed over ``path``.

    For writers that want a file name (``savefig``, ``safetensors.save_file``). On an
    exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write(
    path: str | Path, write: Callable[[IO], Any], *, mode: str = "w", **open_kwargs: Any
) -> Path:
    """Write ``path`` whole through ``write(file)``: temporary file, fsync, rename.

    ``path``'s folder must exist; ``mode`` and ``open_kwargs`` go to `open`. Returns ``path``.
    """
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as f:
        write(f)
        f.flush()
    return Path(path)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """`atomic_write` of a string."""
    return atomic_write(path, lambda f: f.write(text), encoding=encoding)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """`atomic_write` of bytes."""
    return atomic_write(path, lambda f: f.write(data), mode="wb")


def atomic_write_json(path: str | Path, data: Any, indent: int | None = 1) -> Path:
    """`atomic_write` of ``json.dumps(data, indent=indent, default=str)``."""
    return atomic_write_text(path, json.dumps(data, indent=indent, default=str))


class LockedError(ConfigError):
    """The folder is locked by another live process (the message names it); a user-facing
    refusal, so the CLI prints it without a traceback and exits non-zero."""


class DirectoryLock:
    """An exclusive lock on a folder (``flock`` on ``<folder>/.lock``), for one writer at a time.

    The lock file records the holder (pid, start, ``command``) for the `LockedError` a second
    writer gets. The kernel drops the lock when the holder dies; child processes do not
    inherit it; the holding process may re-enter. A folder the lock created is removed on
    release when the lock file is all it holds.
    """

    def __init__(self, directory: str | Path, command: str | None = None) -> None:
        self.directory = Path(directory)
        self.command = command if command is not None else " ".join(sys.argv)
        self._fd: int | None = None
        self._created = False

    @property
    def path(self) -> Path:
        return self.directory / LOCK_FILE

    def holder(self) -> dict[str, Any]:
        """What the lock file says about its holder ({} when unreadable or empty)."""
        try:
            return json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}

    def __enter__(self) -> Self:
        created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            held = self.holder()
            if held.get("pid") == os.getpid():
                return self  # this process holds it already (re-entered)
            raise LockedError(self._message(held)) from None
        info = {
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "command": self.command,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        os.fsync(fd)
        self._fd, self._created = fd, created
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            if self._created and [p.name for p in self.directory.iterdir()] == [LOCK_FILE]:
                self.path.unlink()
                self.directory.rmdir()
        os.close(fd)  # releases the flock

    def _message(self, held: dict[str, Any]) -> str:
        who = (
            f"process {held.get('pid', '?')} (started {held.get('started', '?')}"
            + (f": {held['command']}" if held.get("command") else "")
            + ")"
        )
        return (
            f"{self.directory} is in use by {who}; two writers would corrupt it. Wait "
            "for it to finish (or stop it), or choose another output folder."
        )
