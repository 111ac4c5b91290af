"""`<home>/serve.json`: what a running `kbflow serve` tells other kbflow processes on its home.

Light on purpose (json and os only): `kbflow lookup` reads it before importing anything heavy,
to send its query to the service instead of loading a model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ENDPOINT_FILE = "serve.json"


def announced_endpoint(home: Path) -> dict | None:
    """The announcement of a `kbflow serve` for this home, if its process lives; a stale one
    (the server was SIGKILLed and could not clean up) is removed."""
    path = home / ENDPOINT_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    try:
        os.kill(int(data["pid"]), 0)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data
