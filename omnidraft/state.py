"""State files under $OMNIDRAFT_HOME: where each lives, setting a bad one aside, locking.

    ngram/<drafter>--<target>--<pair>.json              the pair's n-gram cache
    adapters/<drafter>--<target>--<pair>--<profile>.pt  the drafter's LoRA adapter
    adapters/<drafter>--<target>--<pair>--<profile>.head.npz   the acceptance head
    history/<target>--<tokenizer>--<profile>.npz        the lookup history and scorer
    costs/<target>--<drafter>--<backend>.json           what the hybrid policy measured on this machine

A damaged or foreign state file is never deleted and never left to fail the next run:
it is renamed to `<name>.<tag>-<time>-<pid>[-n]` (unique, so two processes or two
set-asides in one second never overwrite an earlier one) and a fresh state starts.
Processes that share a state folder serialize their load-modify-save of one file
through an advisory lock on `<name>.lock` beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from .errors import OmniDraftError



def omnidraft_home() -> Path:
    """Where models, bundles and every piece of learned state live ($OMNIDRAFT_HOME, default ~/.cache/omnidraft);
    one clear error when it names a file or a link that leads nowhere."""
    home = Path(os.environ.get("OMNIDRAFT_HOME", Path.home() / ".cache" / "omnidraft"))
    if home.exists() and not home.is_dir() or home.is_symlink() and not home.exists():
        where = "OMNIDRAFT_HOME" if "OMNIDRAFT_HOME" in os.environ else "the state folder"
        raise OmniDraftError(f"{where} {home} is not a folder (a file, or a link that leads nowhere): "
                             "point OMNIDRAFT_HOME at a folder")
    return home


def ngram_path(drafter: str, target: str, pair_id: str) -> Path:
    return omnidraft_home() / "ngram" / f"{drafter}--{target}--{pair_id}.json"


def adapter_path(drafter: str, target: str, pair_id: str, profile: str) -> Path:
    return omnidraft_home() / "adapters" / f"{drafter}--{target}--{pair_id}--{profile}.pt"


def head_path(drafter: str, target: str, pair_id: str, profile: str) -> Path:
    return omnidraft_home() / "adapters" / f"{drafter}--{target}--{pair_id}--{profile}.head.npz"


def history_path(target: str, fingerprint: str, profile: str) -> Path:
    return omnidraft_home() / "history" / f"{target}--{fingerprint}--{profile}.npz"


def costs_path(target: str, drafter: str, backend: str) -> Path:
    return omnidraft_home() / "costs" / f"{target}--{drafter}--{backend}.json"


def set_aside(path: Path, tag: str, message: str, warn) -> Path | None:
    """Move `path` to a unique `.tag-...` name beside it and warn; None when it could not be moved."""
    path = Path(path)
    stem = f"{path.name}.{tag}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    for n in range(1000):
        aside = path.with_name(stem if n == 0 else f"{stem}-{n}")
        if aside.exists():
            continue
        try:
            os.link(path, aside, follow_symlinks=False)  # fails if `aside` appeared meanwhile: never overwrites
            os.unlink(path)
        except FileExistsError:
            continue
        except FileNotFoundError:
            warn(f"[omnidraft] warning: {message} (another process already moved the old file aside)")
            return None
        except OSError as e:
            if e.errno in (1, 18, 38, 95):  # link unsupported here: rename (checked for existence above)
                try:
                    os.replace(path, aside)
                except OSError as e2:
                    e = e2
                else:
                    break
            warn(f"[omnidraft] warning: {message} (could not move the old file aside: {e.strerror or e})")
            return None
        break
    else:
        warn(f"[omnidraft] warning: {message} (too many set-aside copies; left in place)")
        return None
    warn(f"[omnidraft] warning: {message} (the old file is now {aside.name})")
    return aside


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive advisory lock for `path` (on `<path>.lock`) across load-modify-save."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
