"""How `kbflow lookup` reads to a person: the answer first. A status line (evidence found or
not, its level, how complete), how the search went, then each piece of evidence as delivered:
its rank (1, 2, 3: the delivered order, whatever the candidates' original ranks), title and
breadcrumb, section, quality and level, why it was found in words, and the excerpt wrapped to
the terminal (or to 100 columns when piped). `--json` prints the data itself, unchanged."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kbflow.core.evidence_keys import source_of
from kbflow.core.models import short_name
from kbflow.core.wording import counted

PIPED_WIDTH = 100
MIN_WIDTH = 40
INDENT = "   "
EXCERPT_INDENT = "     "

L0_REASONS = {
    "l0_keyword_overlap": "its keywords match the query (L0 index)",
    "l0_title_overlap": "its title shares words with the query (L0 index)",
    "l0_entity_overlap": "an identifier in the query is one of its entities (L0 index)",
    "l0_domain_overlap": "its breadcrumb domain matches the query (L0 index)",
    "l0_category_overlap": "its category matches the query (L0 index)",
}
MODES = {
    "hybrid": "hybrid: vector meaning and BM25 keywords, fused",
    "dense": "dense: vector meaning only",
    "bm25": "bm25: keywords only",
}
FALLBACKS = {
    "filtered_vector_low_quality": "found only weak evidence",
    "filtered_vector_no_evidence": "found no usable evidence",
}


def output_width() -> int:
    """The terminal's width; piped, PIPED_WIDTH (COLUMNS, when set, wins either way)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return max(MIN_WIDTH, shutil.get_terminal_size((PIPED_WIDTH, 24)).columns)
    return PIPED_WIDTH


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Each line of `text` wrapped to `width` terminal cells (wide characters count two),
    every output line starting with `indent`; blank lines kept, long words folded."""
    from rich.console import Console
    from rich.text import Text

    console = Console(width=width, file=open(os.devnull, "w"))  # noqa: SIM115 (measures only)
    room = max(width - len(indent), 10)
    out: list[str] = []
    for line in text.splitlines() or [""]:
        if not line.strip():
            out.append("")
            continue
        out += [
            indent + part.plain.rstrip()
            for part in Text(line.expandtabs(4)).wrap(console, room, overflow="fold")
        ]
    console.file.close()
    return out


def print_lookup(data: Mapping[str, Any], agent: bool = False, width: int | None = None) -> None:
    for line in lookup_lines(data, agent, width or output_width()):
        print(line)


def lookup_lines(data: Mapping[str, Any], agent: bool, width: int) -> list[str]:
    """The readable view of a lookup's JSON data (a LookupResult, or a RagToolResult)."""
    if agent:
        return _agent_lines(data, width)
    trace = data["retrievalTrace"]
    evidence = data["evidence"]
    lines = wrap(
        f"{_verdict(data)} — {len(evidence)} delivered of {counted(data['candidateCount'], 'candidate')} — "
        f"completeness {data['completenessHint']}",
        width,
    )
    query = data["query"] + (" (truncated)" if data.get("queryTruncated") else "")
    lines += wrap(f"query: {query}", width)
    lines += wrap(_search_line(data["mode"], trace), width)
    lines += [x for text in _gate_lines(trace) for x in wrap(text, width)]
    if not data["found"]:
        return [*lines, *wrap(data["message"] or "", width)]
    levels = _level_of(trace, evidence)
    for rank, item in enumerate(evidence, start=1):
        lines += ["", *_evidence_lines(rank, item, levels, trace, width)]
    if not data["relevanceLevel"]:
        lines += ["", *wrap(WEAK, width)]
    return lines


def _verdict(data: Mapping[str, Any]) -> str:
    """The lookup in words: found at a level, weak (and what weak means), or nothing usable."""
    if not data["found"]:
        return "no usable evidence"
    if data["relevanceLevel"]:
        return f"evidence FOUND — level {data['relevanceLevel']}"
    return "evidence WEAK — close to the question, but it vouches for no answer"


WEAK = (
    "weak: the evidence is close to the question but does not vouch for an answer (it may be about "
    "something else the question shares words with); corroborate before acting"
)


def _search_line(mode: str, trace: Mapping[str, Any]) -> str:
    attempt = trace["selectedAttempt"]
    category = trace["l0"].get("categoryFilter")
    if attempt == "FILTERED_VECTOR":
        how = f"searched within the L0 category {category}"
    elif attempt == "UNFILTERED_VECTOR_RETRY":
        why = FALLBACKS.get(trace.get("fallbackReason") or "", "was weak")
        how = f"the unfiltered retry: the search within the L0 category {category} {why}"
    else:
        how = "searched the whole scope (no L0 category stood out)"
    return f"search: {MODES.get(mode, mode)}; attempt {attempt}: {how}"


def _gate_lines(trace: Mapping[str, Any]) -> list[str]:
    """The gate's decision in words, with the signals and thresholds it came from."""
    gate = trace.get("gate")
    if not gate:
        return []
    line = f"gate: {gate['decision']}"
    if gate.get("topEvidenceKey"):
        signals = ", ".join(f"{k} {v:.2f}" for k, v in gate["topSignals"].items())
        line += (
            f" — best {gate['topEvidenceKey']} ({signals}) quality {gate['topQuality']:.2f}"
            f"{_weighed(gate)}; floor {gate['floor']:.2f}, reference {gate['reference']:.2f}, "
            f"precise {gate['precise']:.2f}"
        )
    models = trace.get("models", {})
    return [
        line,
        *_level_line(gate),
        *(
            f"scope {scope}: model {short_name(models.get(scope, '?'))}; calibration {label}"
            for scope, label in trace.get("calibrations", {}).items()
        ),
    ]


def _level_line(gate: Mapping[str, Any]) -> list[str]:
    """How the level was reached from the first piece of evidence: its confidence, the level
    model's arithmetic, and the question's words it does not cover."""
    if gate.get("confidence") is None:
        return []
    weights, signals = gate.get("levelWeights") or {}, gate.get("levelSignals") or {}
    terms = [f"{weights.get('bias', 0.0):+.2f}"] + [
        f"{w:+.2f}×{name} {signals.get(name, 0.0):.2f}" for name, w in weights.items() if name != "bias"
    ]
    line = (
        f"level: {gate['firstEvidenceKey']} confidence {gate['confidence']:.2f} = "
        f"sigmoid({' '.join(terms)}); reference {gate['reference']:.2f}, precise {gate['precise']:.2f}"
    )
    if gate.get("uncovered"):
        line += f"; it does not contain: {', '.join(gate['uncovered'])}"
    return [line]


def _weighed(gate: Mapping[str, Any]) -> str:
    """The quality as its logistic model computed it: each signal times its weight."""
    weights = gate.get("weights") or {}
    if not weights:
        return ""
    terms = [f"{weights.get('bias', 0.0):+.2f}"] + [
        f"{w:+.2f}×{name} {gate['topSignals'].get(name, 0.0):.2f}"
        for name, w in weights.items()
        if name != "bias"
    ]
    return f" = sigmoid({' '.join(terms)})"


def _level_of(trace: Mapping[str, Any], evidence: Sequence[Mapping[str, Any]]) -> Any:
    """An evidence's level from its confidence (the level model), else its quality. The gate's
    thresholds are those of one scope: they tell PRECISE from REFERENCE for evidence of that
    scope (or of any scope when all share one calibration); elsewhere only weak or not can be
    told."""
    gate = trace.get("gate") or {}
    precise = gate.get("precise")
    shared = len(set(trace.get("calibrations", {}).values())) <= 1
    key = gate.get("firstEvidenceKey") if gate.get("confidence") is not None else gate.get("topEvidenceKey")
    doc = source_of(key) if key else ""
    scopes = {e["kbScope"] for e in evidence if e["docId"] == doc}  # the best may not be delivered
    scope = scopes.pop() if len(scopes) == 1 else None

    def level(item: Mapping[str, Any]) -> tuple[str, str]:
        """(the level in a word, what stands behind it in a line; "" when nothing to add)."""
        confidence = item.get("confidence")
        said = "" if confidence is None else f"confidence {confidence:.2f}"
        if item.get("weak"):
            lacks = f" (it does not contain {', '.join(item['uncovered'])})" if item.get("uncovered") else ""
            why = f"does not vouch for an answer{lacks}; corroborate before acting"
            why = f"{said}: {why}" if said else why
            return "weak", why
        score = item["qualityScore"] if confidence is None else confidence
        if precise is None or not (shared or item["kbScope"] == scope):
            return "usable", said
        return ("PRECISE" if score >= precise else "REFERENCE"), said

    return level


def _evidence_lines(
    rank: int, e: Mapping[str, Any], level: Any, trace: Mapping[str, Any], width: int
) -> list[str]:
    where = " · ".join(x for x in (e.get("breadcrumb"), f"scope {e['kbScope']}", e["evidenceKey"]) if x)
    lines = wrap(f"{rank}. {e.get('title') or e['docId']}", width)
    lines += wrap(where, width, INDENT)
    lines += wrap(f"section: {e.get('headingPath') or '(before the first heading)'}", width, INDENT)
    word, why = level(e)
    lines += wrap(f"quality {e['qualityScore']:.2f} · {word} · {_ranks(e)}", width, INDENT)
    if why:
        lines += wrap(f"{word}: {why}" if word == "weak" else why, width, INDENT)
    lines += wrap("why: " + "; ".join(hit_reasons(e, trace)), width, INDENT)
    return [*lines, "", *wrap(_body(e["excerpt"], e.get("headingPath", "")), width, EXCERPT_INDENT)]


def _ranks(e: Mapping[str, Any]) -> str:
    """Where each leg ranked it: agreement between the legs is part of why to trust it."""
    dense, bm25 = e.get("denseRank"), e.get("sparseRank")
    return f"dense #{dense if dense else '–'}, BM25 #{bm25 if bm25 else '–'}"


def _body(excerpt: str, heading_path: str) -> str:
    """The excerpt without the heading path every chunk starts with (the section line says it)."""
    first, _, rest = excerpt.partition("\n")
    if heading_path and first.strip() == heading_path.strip():
        return rest.strip("\n") or excerpt
    return excerpt


def hit_reasons(e: Mapping[str, Any], trace: Mapping[str, Any]) -> list[str]:
    """Why this evidence was found, in words: what its quality came from, what the L0 index
    matched, and the retry that found it when the filtered search fell short."""
    signals = e.get("signals") or {}
    words: list[str] = []
    if "cosine" in signals:
        words.append(f"close in meaning to the query (cosine {signals['cosine']:.2f})")
    if "coverage" in signals:
        words.append(_coverage_words(signals["coverage"]))
    words += [L0_REASONS.get(r, r.replace("_", " ")) for r in e.get("hitReasons", [])]
    if trace.get("selectedAttempt") == "UNFILTERED_VECTOR_RETRY":
        words.append("found by the unfiltered retry")
    return words or ["ranked by the search"]


def _coverage_words(share: float) -> str:
    if share >= 0.999:
        return "contains every term of the query"
    if share <= 0.0:
        return "contains none of the query's terms"
    return f"contains {share:.0%} of the query's terms"


def _agent_lines(data: Mapping[str, Any], width: int) -> list[str]:
    """The agent's projection (RagToolResult): status line, then each evidence as delivered."""
    lines = wrap(
        f"evidence {data['evidence_status']} — level {data['relevance_level'] or 'none'} — "
        f"{len(data['evidence'])} delivered"
        + (" (truncated to fit the agent's budget)" if data["truncated"] else ""),
        width,
    )
    if data.get("message"):
        lines += wrap(data["message"], width)
    for rank, e in enumerate(data["evidence"], start=1):
        where = " · ".join(
            x for x in (f"scope {e['kb_scope']}" if e.get("kb_scope") else "", e["evidence_key"]) if x
        )
        weak = " · weak: corroborate before acting" if e.get("weak") else ""
        lines += ["", *wrap(f"{rank}. {e['breadcrumb'] or e['document_id']}", width)]
        lines += wrap(where, width, INDENT)
        lines += wrap(f"section: {e['heading_path'] or '(before the first heading)'}", width, INDENT)
        lines += wrap(f"quality {e['quality_score']:.2f}{weak}", width, INDENT)
        lines += ["", *wrap(_body(e["excerpt"], e["heading_path"]), width, EXCERPT_INDENT)]
    return lines


def widest(lines: Iterable[str]) -> int:
    """The widest line in terminal cells (what the width promise is about)."""
    from rich.cells import cell_len

    return max((cell_len(x) for x in lines), default=0)
