"""One way to keep a piece of learned state in a file (state.py says where each lives).

Every kind of learned state (the n-gram cache, the acceptance head, the lookup history, the
hybrid's measured costs, the drafter's adapter) is opened and saved through a `StateFile`:

  - open: no file, a fresh state; `reset`, the file set aside and a fresh state; a file that is
    damaged, foreign or implausible (its reader raises StateFileError, or ValueError), or a link
    that leads nowhere (dangling, or a loop), set aside with a one-line warning and a fresh state;
    a file that cannot be read at all (permissions), a warning and a fresh state, the file kept;
  - save: the kind's writer (which takes the file's lock, merges what another process saved
    meanwhile, and replaces the file atomically: atomic.py, state.locked); a link that leads
    nowhere is set aside first, never silently replaced; a failure is a warning, never an error
    (the reply is already out).

Each kind's file carries its own format name and version, and its reader checks every field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from .state import set_aside

T = TypeVar("T")


class StateFileError(ValueError):
    """A state file that is unreadable, damaged, implausible or made for something else: set aside, never fatal."""


def leads_nowhere(path: Path) -> bool:
    """A symbolic link whose target is missing, or a loop of links."""
    return path.is_symlink() and not path.exists()


@dataclass(frozen=True)
class StateFile:
    what: str  # how messages name it: "n-gram cache"
    path: Path | None  # None: kept in memory only
    fresh: str = "starting afresh"  # what messages say happens instead: "starting a fresh cache"

    def open(self, read: Callable[[Path], T], fresh: Callable[[], T], warn, reset: bool = False) -> T:
        """The state read from the file, or a fresh one (see the module doc)."""
        path = self.path
        if path is None:
            return fresh()
        if leads_nowhere(path):
            set_aside(path, "bad", f"{self.what} {path.name} is a link that leads nowhere; {self.fresh}", warn)
            return fresh()
        if not path.exists():
            return fresh()
        if reset:
            set_aside(path, "reset", f"adaptation reset: {self.fresh}", warn)
            return fresh()
        try:
            return read(path)
        except FileNotFoundError:  # another process set it aside meanwhile
            return fresh()
        except (ValueError, KeyError, TypeError) as e:  # StateFileError and the readers' field checks
            set_aside(path, "bad", f"{self.what} {path.name} is {e}; {self.fresh}", warn)
            return fresh()
        except OSError as e:
            warn(f"[omnidraft] warning: cannot read the {self.what} {path}: {e.strerror or e}; {self.fresh} "
                 "(the file is left as it is)")
            return fresh()

    def save(self, write: Callable[[Path], None], warn) -> bool:
        """Write through the kind's writer; False (and a warning) when it could not be saved."""
        path = self.path
        if path is None:
            return False
        try:
            if leads_nowhere(path):
                set_aside(path, "bad", f"{self.what} {path.name} is a link that leads nowhere; writing a new file",
                          warn)
            write(path)
            return True
        except OSError as e:
            warn(f"[omnidraft] warning: could not save the {self.what} to {path}: {e.strerror or e}")
        except Exception as e:  # noqa: BLE001 - a bug must not cost the user what was generated
            warn(f"[omnidraft] warning: could not save the {self.what} to {path}: {type(e).__name__}: {e}")
        return False
