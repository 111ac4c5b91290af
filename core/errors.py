"""One base for every error kbflow tells a person in one line, with the exit code it means.

The CLI catches `KbflowError` alone and prints `kbflow: error: <message>`; the class decides
the exit code, so a script can tell "fix your input" from "try again later":

- 2 `InputError`: the input or the configuration is wrong; rerunning unchanged fails again.
- 3 `StoreError`: the stores are not ready (held by another process, locked by another run,
  schema behind, index missing, service unreachable); the same command can succeed later.

Each concrete error also keeps the builtin base it always had (ValueError, RuntimeError), so
code that caught those still does.
"""

from __future__ import annotations


class KbflowError(Exception):
    """An expected failure, reported in one line without a traceback."""

    exit_code = 2


class InputError(KbflowError):
    """The input or the configuration is wrong."""

    exit_code = 2


class StoreError(KbflowError):
    """The stores cannot serve this now; the command can succeed later."""

    exit_code = 3
