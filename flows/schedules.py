"""Scheduled reindex deployments: `kbflow serve-flows --reindex ROOT[:SCOPE]@CRON`.

Each spec becomes a deployment of the `reindex` flow (flows/reindex.py) on its own cron,
served next to the eval deployments. Specs are checked before anything is registered: a typo
in a root, a scope or a cron should fail at start-up, not silently at 3 a.m.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kbflow.core.errors import InputError
from kbflow.core.validation import InvalidValue, validate_scope

SPEC_HELP = "ROOT[:SCOPE]@CRON, e.g. 'docs/:team-a@0 3 * * *' or 'seed-docs@@daily'"


SERVE_FLOWS_EPILOG = """\
--reindex ROOT[:SCOPE]@CRON: ROOT is a directory (recorded absolute, as reindex records it),
SCOPE an optional kb_scope ([A-Za-z0-9_-]{1,64}), CRON five fields or a macro such as @daily.
Quote the spec: the cron has spaces. A bad spec is refused before anything is registered.

examples:
  kbflow serve-flows                                    eval 06:00, corpus refresh 05:00
  kbflow serve-flows --reindex 'docs/@0 * * * *'        plus docs/ every hour, all its scopes
  kbflow serve-flows --reindex 'docs/:team-a@0 3 * * *' --reindex 'runbooks@@daily'
  kbflow serve-flows --reindex 'docs/@0 3 * * *' --dry-run     print the deployments as JSON
"""


class ScheduleSpecError(InputError, ValueError):
    """A --reindex spec that cannot be scheduled; the message names the spec and the fix."""


@dataclass(frozen=True)
class ReindexSchedule:
    root: str  # normalised as reindex records it
    scope: str | None
    cron: str

    @property
    def name(self) -> str:
        """Stable deployment name: readable, and unique per (root, scope)."""
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.basename(self.root)) or "root"
        digest = hashlib.sha1(f"{self.root}\0{self.scope or ''}".encode()).hexdigest()[:6]
        return f"kbflow-reindex-{base}{'-' + self.scope if self.scope else ''}-{digest}"

    def parameters(self, home: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"roots": [self.root], "scope": self.scope, "full": False}
        if home:
            params["home"] = home
        return params


def _check_cron(spec: str, cron: str) -> str:
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        return CronSchedule(cron=cron).cron  # the validation Prefect itself applies
    except ValidationError:
        raise ScheduleSpecError(
            f"--reindex {spec!r}: invalid cron {cron!r}; five fields 'minute hour day month weekday' "
            "(e.g. '0 3 * * *') or a macro such as '@daily'"
        ) from None


def parse_reindex_spec(spec: str, *, must_exist: bool = True) -> ReindexSchedule:
    """ROOT[:SCOPE]@CRON. The cron follows the last '@' (a '@daily' macro keeps its '@'); the
    scope follows the root's last ':' unless that part holds a '/'."""
    at = spec.rfind("@")
    if at <= 0:
        raise ScheduleSpecError(f"--reindex {spec!r}: expected {SPEC_HELP}")
    if spec[at - 1] == "@":
        at -= 1
    target, cron = spec[:at], spec[at + 1 :].strip()
    root, scope = target, None
    head, sep, tail = target.rpartition(":")
    if sep and "/" not in tail:
        root, scope = head, tail
        if not scope:
            raise ScheduleSpecError(f"--reindex {spec!r}: empty SCOPE after ':'; expected {SPEC_HELP}")
        try:
            validate_scope(scope)
        except InvalidValue as exc:
            raise ScheduleSpecError(f"--reindex {spec!r}: {exc}") from None
    if not root.strip():
        raise ScheduleSpecError(f"--reindex {spec!r}: missing ROOT; expected {SPEC_HELP}")
    from kbflow.ingest.sources import normalize_root  # the write side's scan, only for a spec

    norm = normalize_root(root)
    if must_exist and not os.path.isdir(norm):
        raise ScheduleSpecError(f"--reindex {spec!r}: root {norm} is not a directory (every run would fail)")
    return ReindexSchedule(root=norm, scope=scope, cron=_check_cron(spec, cron))


def parse_reindex_specs(specs: Sequence[str], *, must_exist: bool = True) -> list[ReindexSchedule]:
    """All specs, refusing one (root, scope) scheduled twice."""
    out: list[ReindexSchedule] = []
    seen: dict[tuple[str, str | None], str] = {}
    for spec in specs:
        parsed = parse_reindex_spec(spec, must_exist=must_exist)
        key = (parsed.root, parsed.scope)
        if key in seen:
            raise ScheduleSpecError(f"--reindex {spec!r} schedules the same root and scope as {seen[key]!r}")
        seen[key] = spec
        out.append(parsed)
    return out


def reindex_deployments(schedules: Sequence[ReindexSchedule], home: str | None) -> list[Any]:
    """Prefect deployments of the `reindex` flow, one per schedule."""
    from kbflow.flows.reindex import reindex_flow

    return [
        reindex_flow.to_deployment(name=s.name, cron=s.cron, parameters=s.parameters(home)) for s in schedules
    ]


def reindex_deployments_summary(schedules: Sequence[ReindexSchedule], home: str | None) -> list[dict]:
    """What would be registered, in the shape of flows.eval.deployments_summary (--dry-run)."""
    from kbflow.flows.common import deployment_summary  # not at import: the CLI's parser reads this module

    out = []
    for s, d in zip(schedules, reindex_deployments(schedules, home), strict=True):
        out.append(
            {
                **deployment_summary("reindex", d, s.cron),
                "root": s.root,
                "scope": s.scope,
                "parameters": d.parameters,
            }
        )
    return out
