"""Files that are either wholly written or not there: temporary file, fsync, rename, fsync the folder.

A process killed mid-write leaves the previous file intact and, at worst, a temporary file named
``.NAME.tmpPID`` beside it; :func:`remove_stale_temporaries` deletes those of dead processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "atomic_write_text", "temporary_name", "remove_stale_temporaries", "staged_dir"]

log = logging.getLogger(__name__)

_TEMP = re.compile(r"^\.(?P<name>.+)\.tmp(?P<pid>\d+)$")


def temporary_name(path: Path) -> Path:
    """Where ``path`` is written before the rename: ``.NAME.tmpPID`` in the same folder."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """``with atomic_write(p) as f: f.write(...)``: ``p`` appears complete on success, unchanged on error."""
    p = Path(path)
    tmp = temporary_name(p)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(p.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files (``.NAME.tmpPID``) that killed writers left in ``folder``; return them."""
    removed = []
    d = Path(folder)
    if not d.is_dir():
        return removed
    for p in d.iterdir():
        m = _TEMP.match(p.name)
        if m and p.is_file() and not _alive(int(m.group("pid"))):
            p.unlink(missing_ok=True)
            removed.append(p)
    if removed:
        log.info("removed %d temporary file(s) a killed writer left in %s: %s", len(removed), d,
                 ", ".join(p.name for p in removed[:5]))  # fmt: skip
    return removed


@contextlib.contextmanager
def staged_dir(out: str | os.PathLike, error: type[Exception] = FileExistsError) -> Iterator[Path]:
    """A temporary folder beside ``out`` that the caller fills; it becomes ``out`` (which must be
    missing or empty, else ``error``) only if nothing failed, and is removed otherwise: a directory
    that appears whole or not at all (the importers' model directories)."""
    dest = Path(out)
    if dest.exists() and any(dest.iterdir()):
        raise error(f"{dest}: exists and is not empty")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            dest.rmdir()
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
