"""What a stored calibration was fitted on: the `kbflow eval calibrate` arguments, kept with
it so that it can be fitted again on the same data (calibration/recalibrate.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kbflow.retrieval.gate import FEATURES

# A pseudo-query is lifted from its document, so its coverage is 1 by construction: a weight for
# coverage learned from such pairs says nothing about people's questions. Fitted on cosine alone
# the pairs refused 1.3-11.5 % of the real answerable questions of three labelled sets, against
# 41-89 % with coverage (docs/quality.md, Answerability; python bench/answerability.py).
SELF_FEATURES = ("cosine",)

@dataclass(frozen=True)
class Recipe:
    """The `kbflow eval calibrate` arguments a calibration was fitted from."""

    golden: bool = False
    beir: str | None = None
    negatives: str | None = None
    negatives_from: str | None = None
    self_pairs: bool = False
    max_docs: int = 60
    scope: str | None = None

    @classmethod
    def from_args(cls, args: Any) -> Recipe:
        """Paths are kept absolute: a refit runs wherever the reindex or the flow runs."""
        return cls(
            golden=bool(args.golden),
            beir=_absolute(args.beir),
            negatives=_absolute(getattr(args, "negatives", None)),
            negatives_from=_absolute(getattr(args, "negatives_from", None)),
            self_pairs=bool(getattr(args, "self_pairs", False)),
            max_docs=int(getattr(args, "max_docs", 60)),
            scope=args.scope or None,
        )

    @property
    def origin(self) -> str:
        labelled = self.golden or bool(self.beir)
        if self.self_pairs:
            return "self + labelled" if labelled else "self"
        return "labelled"

    @property
    def features(self) -> tuple[str, ...]:
        """The signals a fit on this recipe's queries can learn."""
        return SELF_FEATURES if self.origin == "self" else tuple(FEATURES)

    def as_args(self) -> SimpleNamespace:
        return SimpleNamespace(**asdict(self))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _absolute(path: Any) -> str | None:
    return str(Path(path).resolve()) if path else None
