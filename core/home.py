"""Which kbflow home a command uses when nobody named one: the nearest `.kbflow` in the current
folder or above it, as git finds its repository. A command that only reads never makes one."""

from __future__ import annotations

from pathlib import Path

from kbflow.core.errors import InputError
from kbflow.core.settings import Settings

HOME_MARKERS = ("kbflow.db", "milvus.db", "serve.json")  # what a kbflow home holds
FOUND_ABOVE = "found: the nearest .kbflow in a folder above the current one"


class HomeMissing(InputError, ValueError):
    """A command that only reads found no kbflow home; the message says where it looked."""


def is_home(folder: Path) -> bool:
    return folder.is_dir() and any((folder / marker).exists() for marker in HOME_MARKERS)


def find_home(start: Path) -> Path | None:
    """The nearest `.kbflow` home in `start` or a folder above it."""
    start = start.absolute()
    for folder in (start, *start.parents):
        if is_home(folder / ".kbflow"):
            return folder / ".kbflow"
    return None


def with_found_home(settings: Settings) -> Settings:
    """Settings whose home nobody set (no --home, KBFLOW_HOME or settings file) use the nearest
    home above the current folder; with none, or one right here, `./.kbflow` as before."""
    if "home" in settings.model_fields_set:
        return settings
    found = find_home(Path.cwd())
    if found is None or found == (Path.cwd() / ".kbflow").absolute():
        return settings
    return settings.model_copy(update={"home": found})


def require_home(settings: Settings) -> None:
    """Raise HomeMissing, saying where it looked and how to point at a home, when the SQLite
    database lives in a home that does not exist (an external database is checked by its use)."""
    if settings.database_url or is_home(settings.home):
        return
    where = settings.home.absolute()
    if "home" in settings.model_fields_set:  # named by --home, KBFLOW_HOME or the settings file
        raise HomeMissing(f"no kbflow home at {where}: check the path, or make it with "
                          f"`kbflow reindex PATH --home {where}`")
    raise HomeMissing(
        f"no kbflow home at {where} (looked in {Path.cwd()} and every folder above it for a .kbflow "
        "home): `kbflow reindex PATH` makes one here; --home DIR or KBFLOW_HOME points at another"
    )
