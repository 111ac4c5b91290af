"""The lookup orchestration: L0 -> search -> quality -> post-process -> (one fallback) ->
rerank -> pack -> assemble -> audit. Each stage is its own module; this one only chains them.

Fallback rule: only an attempt that had a category filter and came back low quality is retried,
exactly once, as UNFILTERED_VECTOR_RETRY with the original query and the same scope(s). The
retry replaces the first result (no merge) and is accepted even if still weak.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import func, select

from kbflow.core import milvus_store as ms
from kbflow.core.analysis import LexicalConfig
from kbflow.core.embedder import DEFAULT_MODEL_ID, Embedder, base_model_id, get_embedder, split_model_id
from kbflow.core.errors import InputError
from kbflow.core.settings import Settings
from kbflow.core.sql import CalibrationRow, ScopeRow
from kbflow.core.stores import Stores, query_threads
from kbflow.core.validation import validate_scope
from kbflow.retrieval import calibration
from kbflow.retrieval.audit import write_audit
from kbflow.retrieval.contracts import (
    NO_EVIDENCE_MESSAGE,
    AttemptTrace,
    LookupResult,
    RetrievalTrace,
)
from kbflow.retrieval.gate import Calibration
from kbflow.retrieval.l0_navigation import navigate
from kbflow.retrieval.packing import pack
from kbflow.retrieval.postprocess import (
    PostprocessConfig,
    Processed,
    attach_l0_reasons,
    gate_trace,
    postprocess,
    score_hits,
)
from kbflow.retrieval.rerank import NoopReranker, Reranker, run_rerank
from kbflow.retrieval.search import ScopeTarget, SearchSpec, search_attempt


class LookupRejected(InputError, ValueError):
    """Bad lookup input (empty query, invalid scope or mode); the message says which."""


class IndexMissing(RuntimeError):
    """Nothing has been indexed yet."""


MODES = ("hybrid", "dense")


@dataclass
class _Timer:
    timings: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str, started: float) -> float:
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + (now - started) * 1000, 3)
        return now


def _postprocess_config(s: Settings) -> PostprocessConfig:
    return PostprocessConfig(max_chunks_per_document=s.max_chunks_per_document, return_n=s.return_n)


def completeness_hint(evidence: list, level: str | None) -> str:
    if not evidence:
        return "none: no usable evidence"
    if len(evidence) < 2 or level != "PRECISE":
        return "partial: weak or single-source evidence; corroborate with logs and metrics"
    return "sufficient: several precise sources"


class Retriever:
    """Holds the opened stores and loaded models for a process; `lookup` is thread-safe for
    reads (the model forward pass is serialized inside the embedder)."""

    def __init__(self, stores: Stores, reranker: Reranker | None = None) -> None:
        self.stores = stores
        self.reranker = reranker or NoopReranker()
        self._loaded: set[str] = set()
        self._checked: dict[str, tuple[tuple, ScopeTarget]] = {}
        self.calibrations: dict[str, Calibration] = {}

    @property
    def settings(self) -> Settings:
        return self.stores.settings

    def _embedder(self, model_id: str) -> Embedder:
        """The model and backend a scope was indexed with, whatever this process's settings say."""
        s = self.settings
        name, backend = split_model_id(model_id)
        return get_embedder(name, s.embedding_device, s.embedding_batch_size, backend, s.resolved_models_dir)

    def warm_up(self, kb_scope: str | None = None) -> None:
        """Load every model the scopes need now, not inside the first lookup."""
        try:
            targets = self.targets(kb_scope)
        except IndexMissing:
            return
        for model_id in {tg.model_id for tg in targets}:
            self._embedder(model_id).encode(["warm-up"], query_threads(self.settings))

    def targets(self, kb_scope: str | None) -> list[ScopeTarget]:
        """The scopes to search. A scope whose row and calibrations are as they were when it was
        last checked is not checked again: that check (an alias round trip to Milvus, the
        calibration look-up) cost a busy service 3-4 ms per lookup."""
        with self.stores.sql.session() as session:
            q = select(ScopeRow).order_by(ScopeRow.kb_scope)
            if kb_scope:
                q = q.where(ScopeRow.kb_scope == kb_scope)
            rows = session.scalars(q).all()
            if not rows and not kb_scope:  # no scope filter: rows are every scope there is
                raise IndexMissing(
                    f"no knowledge is indexed in {self.settings.resolved_milvus_uri}; "
                    "run `kbflow reindex PATH` first"
                )
            calibrated = session.scalar(select(func.max(CalibrationRow.created_at)))
        out = []
        for r in rows:
            key = (
                r.alias,
                r.physical_collection,
                r.model_id,
                r.analyzer,
                r.analysis,
                r.updated_at,
                calibrated,
            )
            known = self._checked.get(r.kb_scope)
            if known is not None and known[0] == key:
                out.append(known[1])
                continue
            target = self._check(r)
            self._checked[r.kb_scope] = (key, target)
            out.append(target)
        return out

    def _check(self, r: ScopeRow) -> ScopeTarget:
        """Is the scope's collection there (and loaded), and which calibration does it use."""
        if ms.alias_target(self.stores.milvus, r.alias) is None:
            raise IndexMissing(f"collection for scope '{r.kb_scope}' is missing; run `kbflow reindex --full`")
        if r.alias not in self._loaded:
            self.stores.milvus.load_collection(r.alias)
            self._loaded.add(r.alias)
        lexical = (
            r.analyzer in self.settings.lexical_quality_analyzers
            and base_model_id(r.model_id) == DEFAULT_MODEL_ID
        )
        self.calibrations[r.kb_scope] = calibration.resolve(
            self.stores.sql, self.settings, r.model_id, r.kb_scope, lexical
        )
        return ScopeTarget(
            r.kb_scope,
            r.alias,
            r.model_id,
            "lexical" if lexical else "dense",
            LexicalConfig.parse(r.analysis),
        )

    def _embed_query(
        self, query: str, targets: list[ScopeTarget], timer: _Timer, t: float
    ) -> tuple[dict[str, np.ndarray], float]:
        """The query's vector for each model the scopes were indexed with. Loading a model (its
        first use in this process) is timed as its own stage, never as embedding."""
        threads = query_threads(self.settings)
        embedders = {model_id: self._embedder(model_id) for model_id in {tg.model_id for tg in targets}}
        for embedder in embedders.values():
            embedder.prepare(threads)
        if time.perf_counter() - t > 0.05:
            t = timer.stage("model_load", t)
        vectors = {model_id: e.encode([query], threads)[0] for model_id, e in embedders.items()}
        return vectors, timer.stage("embed", t)

    def _search(
        self,
        targets: list[ScopeTarget],
        query: str,
        vectors: dict[str, np.ndarray],
        spec: SearchSpec,
        category: str | None,
    ) -> list:
        if not targets:
            return []
        try:
            return search_attempt(self.stores.milvus, targets, query, vectors, spec, category)
        except Exception:  # e.g. a collection dropped behind kbflow's back: check again next time
            self._checked.clear()
            raise

    def lookup(
        self, query: str, *, kb_scope: str | None = None, mode: str | None = None, depth: int | None = None
    ) -> LookupResult:
        """`depth` asks for at least that many candidates (the eval ranks them); the evidence
        returned is still bounded by return_n."""
        s = self.settings
        if not isinstance(query, str) or not query.strip():
            raise LookupRejected("query is empty: give the symptom, error message or question to look up")
        mode = mode or s.search_mode
        if mode not in MODES:
            raise LookupRejected(f"invalid mode {mode!r}: use one of {', '.join(MODES)}")
        kb_scope = kb_scope if kb_scope is not None else (s.kb_scope or None)
        if kb_scope:
            try:
                validate_scope(kb_scope)
            except ValueError as exc:
                raise LookupRejected(str(exc)) from exc
        query = " ".join(query.split())
        truncated = len(query) > s.max_query_chars
        query = query[: s.max_query_chars]

        timer = _Timer()
        t0 = t = time.perf_counter()
        targets = self.targets(kb_scope)
        with self.stores.sql.session() as session:
            nav = navigate(session, query, [tg.kb_scope for tg in targets])
        t = timer.stage("l0", t)
        vectors, t = self._embed_query(query, targets, timer, t)

        cfg = _postprocess_config(s)
        spec = SearchSpec(
            mode=mode,
            limit=max(s.retrieve_k, depth or 0),
            rrf_k=s.rrf_k,
            dense_weight=s.dense_weight,
            sparse_weight=s.sparse_weight,
            fusion=s.fusion,
            convex_alpha=s.convex_alpha,
            lexical_trust=s.lexical_trust,
        )
        cals = {tg.kb_scope: self.calibrations[tg.kb_scope] for tg in targets}
        candidates: dict[str, list] = {}

        def attempt(name: str, category: str | None) -> tuple[Processed, AttemptTrace]:
            started = time.perf_counter()
            hits = self._search(targets, query, vectors, spec, category)
            st = timer.stage("search", started)
            hits = attach_l0_reasons(score_hits(hits, query, cals), nav)
            processed = postprocess(hits, cfg, cals)
            candidates[name] = processed.ranked
            timer.stage("postprocess", st)
            trace = AttemptTrace(
                attempt=name,
                query_used=query,
                mode=mode,
                category_filter=category,
                scopes=[tg.kb_scope for tg in targets],
                candidate_count=len(hits),
                top_quality=None if processed.top_quality is None else round(processed.top_quality, 4),
                low_quality=processed.low_quality,
                elapsed_ms=round((time.perf_counter() - started) * 1000, 3),
            )
            return processed, trace

        first_name = "FILTERED_VECTOR" if nav.category_filter else "UNFILTERED_VECTOR"
        selected, first_trace = attempt(first_name, nav.category_filter)
        attempts = [first_trace]
        selected_name, fallback_reason = first_name, None
        if nav.category_filter and selected.low_quality and s.fallback_enabled:
            fallback_reason = (
                "filtered_vector_no_evidence" if not selected.ranked else "filtered_vector_low_quality"
            )
            selected, retry_trace = attempt("UNFILTERED_VECTOR_RETRY", None)  # original query, scope kept
            attempts.append(retry_trace)
            selected_name = "UNFILTERED_VECTOR_RETRY"

        t = time.perf_counter()
        evidence, rerank_trace = run_rerank(self.reranker, query, selected.evidence)
        t = timer.stage("rerank", t)
        context = pack(evidence, s.context_char_budget)
        timer.stage("pack", t)
        timer.timings["total"] = round((time.perf_counter() - t0) * 1000, 3)

        found = bool(evidence)
        result = LookupResult(
            query=query,
            kb_scope=kb_scope,
            mode=mode,
            found=found,
            evidence=evidence,
            candidate_count=len(selected.ranked),
            returned_count=len(evidence),
            relevance_level=selected.relevance_level if found else None,
            completeness_hint=completeness_hint(evidence, selected.relevance_level),
            message=None if found else NO_EVIDENCE_MESSAGE,
            query_truncated=truncated,
            context=context,
            retrieval_trace=RetrievalTrace(
                l0=nav,
                attempts=attempts,
                selected_attempt=selected_name,
                fallback_reason=fallback_reason,
                timings_ms=timer.timings,
                calibrations={sc: c.label for sc, c in cals.items()},
                gate=gate_trace(selected, cals),
            ),
            rerank_trace=rerank_trace,
        )
        result.candidates = candidates
        return write_audit(self.stores.sql, result)
