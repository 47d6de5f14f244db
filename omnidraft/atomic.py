"""Crash-safe writes: build next to the destination, fsync, then rename.

A reader (or a process restarted after SIGKILL) sees either the old or the new
version of a file or folder, never a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike):
    """Yield a temporary folder; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial"))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; the result is an ordinary folder
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_stale_temporaries(folder: Path, older_than_s: float = 3600.0) -> list[str]:
    """Delete what a killed writer left in `folder` (our `.NAME.*.tmp` files and `.NAME.*.partial` folders),
    only when untouched for `older_than_s` seconds, so a live writer's temporary is never removed."""
    import time

    removed = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    now = time.time()
    for p in entries:
        if not p.name.startswith(".") or not p.name.endswith((".tmp", ".partial")):
            continue
        try:
            if now - p.lstat().st_mtime < older_than_s:
                continue
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
            removed.append(p.name)
        except OSError:
            continue
    return removed


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
