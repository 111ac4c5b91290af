"""This user's cache of model exports, shared by every kbflow home on the machine.

An ONNX export is a pure function of the installed model and kbflow's export code (both are in
its folder's name), so one copy per user serves every home: a new home (an eval, a test, a second
knowledge base) reuses it instead of importing torch and exporting again (~8 s).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path


def user_models_dir() -> Path | None:
    """$XDG_CACHE_HOME (or ~/.cache) /kbflow/models, created if need be; None where it cannot be
    written (no home directory, a read-only one): the caller then keeps exports in the home."""
    return _models_dir(os.environ.get("XDG_CACHE_HOME", ""), os.environ.get("HOME", ""))


@lru_cache(maxsize=8)
def _models_dir(xdg_cache_home: str, home: str) -> Path | None:
    """Checked once per process and environment: every lookup asks for the folder."""
    try:
        base = Path(xdg_cache_home or Path(home or Path.home()) / ".cache")
        path = base / "kbflow" / "models"
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # RuntimeError: Path.home() without HOME or a passwd entry
        return None
    return path if os.access(path, os.W_OK | os.X_OK) else None
