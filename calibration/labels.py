"""What calibration data keeps of a lookup: the candidates of the attempt its gate judged, each
with its signals and whether it is relevant.

The signals are the ones the lookup computed (`own_signals`). A study of signals the lookup does
not compute passes its own `Signals` (bench/signals.py: the ones tried for the gate and dropped),
so the next idea is measured on the same calibration data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# (query, the candidates, their scope, the documents the lookup left out) -> each one's signals
Signals = Callable[[str, Sequence[Any], str, Sequence[str]], list[dict[str, float]]]


def own_signals(
    _query: str, hits: Sequence[Any], _scope: str = "", _left_out: Sequence[str] = ()
) -> list[dict[str, float]]:
    """The signals the lookup computed for each candidate (cosine, coverage, …)."""
    return [dict(h.signals) for h in hits]


def selected_hits(result: Any) -> list[Any]:
    """The candidates of the attempt a lookup selected (what its gate judged)."""
    return result.candidates.get(result.retrieval_trace.selected_attempt, [])


def labelled_hits(
    query: str,
    hits: Sequence[Any],
    relevant: Callable[[Any], bool],
    scope: str,
    left_out: Sequence[str] = (),
    signals: Signals = own_signals,
) -> list[tuple[dict[str, float], bool]]:
    """Calibration data of one query: each candidate's signals and whether it is relevant."""
    return [(sig, relevant(h)) for h, sig in zip(hits, signals(query, hits, scope, left_out), strict=True)]
