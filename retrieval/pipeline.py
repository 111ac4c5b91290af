"""The lookup orchestration: L0 -> search -> quality -> post-process -> (one fallback) ->
rerank -> pack -> assemble -> audit. Each stage is its own module (`fallback` holds the retry
rule, `assemble` the delivered result); this one only chains them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import func, select

from kbflow.core.analysis import LexicalConfig, chunk_terms
from kbflow.core.embedder import (
    DEFAULT_MODEL_ID,
    TORCH,
    Embedder,
    base_model_id,
    get_embedder,
    split_model_id,
)
from kbflow.core.errors import StoreError
from kbflow.core.settings import Settings
from kbflow.core.sql import CalibrationRow, ScopeRow
from kbflow.core.stores import Stores, query_threads
from kbflow.core.vocabulary import Vocabulary, scope_documents_counted
from kbflow.core.vocabulary import read as read_vocabulary
from kbflow.retrieval import calibration, support
from kbflow.retrieval.assemble import Request, assemble
from kbflow.retrieval.audit import write_audit
from kbflow.retrieval.contracts import AttemptTrace, Hit, L0Navigation, LookupResult
from kbflow.retrieval.fallback import with_fallback
from kbflow.retrieval.gate import Calibration
from kbflow.retrieval.l0_navigation import navigate
from kbflow.retrieval.packing import pack
from kbflow.retrieval.postprocess import (
    PostprocessConfig,
    Processed,
    attach_l0_reasons,
    postprocess,
    score_hits,
)
from kbflow.retrieval.request import UnknownScope, checked_request, excluded_sources, unknown_scope_message
from kbflow.retrieval.rerank import NoopReranker, Reranker, run_rerank
from kbflow.retrieval.search import ScopeTarget, SearchSpec, search_attempt

_L0 = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kbflow-l0")


class IndexMissing(StoreError, RuntimeError):
    """Nothing has been indexed yet."""


@dataclass
class _Timer:
    timings: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str, started: float) -> float:
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + (now - started) * 1000, 3)
        return now


@dataclass
class _Run:
    """What every attempt of one lookup shares."""

    request: Request
    targets: list[ScopeTarget]
    vectors: dict[str, np.ndarray]
    spec: SearchSpec
    cals: dict[str, Calibration]
    nav: L0Navigation
    timer: _Timer
    candidates: dict[str, list] = field(default_factory=dict)
    profiles: dict[str, support.Profile] = field(default_factory=dict)  # per model, made when first needed
    embeds: dict[str, Callable[[list[str]], np.ndarray]] = field(default_factory=dict)  # started early
    vocabularies: dict[str, Vocabulary] = field(default_factory=dict)  # per scope


def _postprocess_config(s: Settings) -> PostprocessConfig:
    return PostprocessConfig(max_chunks_per_document=s.max_chunks_per_document, return_n=s.return_n)


class Retriever:
    """Holds the opened stores and loaded models for a process; `lookup` is thread-safe for
    reads (the model forward pass is serialized inside the embedder)."""

    def __init__(self, stores: Stores, reranker: Reranker | None = None) -> None:
        self.stores = stores
        self.reranker = reranker or NoopReranker()
        self._loaded: set[str] = set()
        self._checked: dict[str, tuple[tuple, ScopeTarget]] = {}
        self.calibrations: dict[str, Calibration] = {}
        self._documents: dict[str, int] = {}  # per scope, as of its last check

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
            self._embedder(model_id).encode_queries(["warm-up"], query_threads(self.settings))

    def model_ids(self) -> list[str]:
        """The embedding models of the indexed scopes."""
        try:
            return sorted({tg.model_id for tg in self.targets(None)})
        except IndexMissing:
            return []

    def targets(self, kb_scope: str | None) -> list[ScopeTarget]:
        """The scopes to search. A scope whose row and calibrations are as they were when it was
        last checked is not checked again: that check (an alias round trip to Milvus, the
        calibration look-up) cost a busy service 3-4 ms per lookup."""
        with self.stores.sql.session() as session:
            q = select(ScopeRow).order_by(ScopeRow.kb_scope)
            if kb_scope:
                q = q.where(ScopeRow.kb_scope == kb_scope)
            rows = session.scalars(q).all()
            if not rows:
                every = [] if not kb_scope else list(session.scalars(select(ScopeRow.kb_scope)))
                if not every:  # nothing indexed at all
                    raise IndexMissing(
                        f"no knowledge is indexed in {self.settings.resolved_milvus_uri}; "
                        "run `kbflow reindex PATH` first"
                    )
                raise UnknownScope(unknown_scope_message(kb_scope or "", sorted(every)))
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
        if self.stores.chunks.alias_target(r.alias) is None:
            raise IndexMissing(f"collection for scope '{r.kb_scope}' is missing; run `kbflow reindex --full`")
        if r.alias not in self._loaded:
            self.stores.chunks.load(r.alias)
            self._loaded.add(r.alias)
        lexical = (
            r.analyzer in self.settings.lexical_quality_analyzers
            and base_model_id(r.model_id) == DEFAULT_MODEL_ID
        )
        self.calibrations[r.kb_scope] = calibration.resolve(
            self.stores.sql, self.settings, r.model_id, r.kb_scope, lexical
        )
        with self.stores.sql.session() as session:  # whether its levels judge coverage (`_judged`)
            self._documents[r.kb_scope] = scope_documents_counted(session, r.kb_scope)
        return ScopeTarget(
            r.kb_scope,
            r.alias,
            r.model_id,
            "lexical" if lexical else "dense",
            LexicalConfig.parse(r.analysis),
        )

    def _embed_query(
        self, query: str, targets: list[ScopeTarget], judged: set[str], timer: _Timer
    ) -> tuple[dict[str, np.ndarray], dict[str, Callable]]:
        """The query's vector for each model the scopes were indexed with, and for the `judged`
        models the coverage signals' embeddings, started beside it (not under torch: its forward
        passes take turns). Loading a model (its first use in this process) is timed as its own
        stage, never as embedding."""
        t, threads = time.perf_counter(), query_threads(self.settings)
        embedders = {model_id: self._embedder(model_id) for model_id in {tg.model_id for tg in targets}}
        for embedder in embedders.values():
            embedder.prepare(threads)
        if time.perf_counter() - t > 0.05:
            t = timer.stage("model_load", t)
        cores = os.cpu_count() or 1
        early = {
            m: support.embed_early(query, lambda texts, e=e: e.encode_queries(texts, threads), cores)
            for m, e in embedders.items()
            if m in judged and e.backend != TORCH
        }
        vectors = {model_id: e.encode_queries([query], threads)[0] for model_id, e in embedders.items()}
        timer.stage("embed", t)
        return vectors, early

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
            return search_attempt(self.stores.chunks, targets, query, vectors, spec, category)
        except Exception:  # e.g. a collection dropped behind kbflow's back: check again next time
            self._checked.clear()
            raise

    def _spec(self, mode: str, depth: int | None, exclude: tuple[str, ...] = ()) -> SearchSpec:
        s = self.settings
        return SearchSpec(
            exclude=exclude,
            mode=mode,
            limit=max(s.retrieve_k, depth or 0),
            rrf_k=s.rrf_k,
            dense_weight=s.dense_weight,
            sparse_weight=s.sparse_weight,
            fusion=s.fusion,
            convex_alpha=s.convex_alpha,
            lexical_trust=s.lexical_trust,
        )

    def _attempt(self, run: _Run, name: str, category: str | None) -> tuple[Processed, AttemptTrace]:
        """One search attempt, scored and post-processed, with its trace."""
        started = time.perf_counter()
        hits = self._search(run.targets, run.request.query, run.vectors, run.spec, category)
        st = run.timer.stage("search", started)
        hits = attach_l0_reasons(score_hits(hits, run.request.query, run.cals), run.nav)
        judged = run.timer.timings.get("support", 0.0)
        judge = (lambda usable: self._judge(run, usable)) if self.settings.level_by_coverage else None
        processed = postprocess(hits, _postprocess_config(self.settings), run.cals, judge)
        run.candidates[name] = processed.ranked
        run.timer.stage("postprocess", st)
        run.timer.timings["postprocess"] -= run.timer.timings.get("support", 0.0) - judged
        trace = AttemptTrace(
            attempt=name,
            query_used=run.request.query,
            mode=run.request.mode,
            category_filter=category,
            scopes=[tg.kb_scope for tg in run.targets],
            candidate_count=len(hits),
            top_quality=None if processed.top_quality is None else round(processed.top_quality, 4),
            low_quality=processed.low_quality,
            elapsed_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return processed, trace

    def _judge(self, run: _Run, hits: list[Hit]) -> list[Hit]:
        """Usable hits with their confidence: the level model of their scope's calibration over
        their quality and how much of the question they cover (`support.py`)."""
        started = time.perf_counter()
        out = []
        for h in hits:
            cal = run.cals[h.kb_scope]
            if cal.kind != "logistic" or h.quality_signal == "lexical":
                out.append(h)  # an uncalibrated or lexical gate: levels read quality
                continue
            vocab = self._vocabulary(run, h.kb_scope)
            if cal.judges_coverage and not cal.levels_apply(vocab.docs):
                out.append(h)  # a scope unlike those its level model saw: levels read quality
                continue
            model = next(tg.model_id for tg in run.targets if tg.kb_scope == h.kb_scope)
            prof = self._profile(run, model)
            terms = chunk_terms(h.title, h.breadcrumb, h.content)
            quality = h.quality_score or 0.0
            update = support.judge(cal, quality, prof, run.vectors[model], h.vector, terms, vocab)
            update["signals"] = {**h.signals, **update["signals"]}
            out.append(h.model_copy(update=update))
        run.timer.stage("support", started)
        return out

    def _profile(self, run: _Run, model_id: str) -> support.Profile:
        if model_id not in run.profiles:
            embedder, threads = self._embedder(model_id), query_threads(self.settings)
            embed = run.embeds.get(model_id) or (lambda texts: embedder.encode_queries(texts, threads))
            run.profiles[model_id] = support.profile(run.request.query, run.vectors[model_id], embed)
        return run.profiles[model_id]

    def _judged(self, targets: list[ScopeTarget], cals: dict[str, Calibration]) -> set[str]:
        """The models whose scopes' levels may read the coverage signals (`_judge`)."""
        if not self.settings.level_by_coverage:
            return set()
        return {
            tg.model_id
            for tg in targets
            if tg.quality_signal != "lexical" and cals[tg.kb_scope].kind == "logistic"
            and cals[tg.kb_scope].levels_apply(self._documents.get(tg.kb_scope, 0))
        }

    def _vocabulary(self, run: _Run, scope: str) -> Vocabulary:
        if scope not in run.vocabularies:
            asked = support.asked_terms(run.request.query)
            with self.stores.sql.session() as session:
                run.vocabularies[scope] = read_vocabulary(session, scope, asked, run.spec.exclude)
        return run.vocabularies[scope]

    def _navigate(
        self, query: str, scopes: list[str], left_out: tuple[str, ...]
    ) -> tuple[L0Navigation, float]:
        t = time.perf_counter()
        with self.stores.sql.session() as session:
            nav = navigate(session, query, scopes, left_out)
        return nav, round((time.perf_counter() - t) * 1000, 3)

    def lookup(
        self,
        query: str,
        *,
        kb_scope: str | None = None,
        mode: str | None = None,
        depth: int | None = None,
        exclude: str | Sequence[str] = (),
        caller: str | None = None,
    ) -> LookupResult:
        """`depth` asks for at least that many candidates (the eval ranks them); the evidence
        returned is still bounded by return_n. `exclude` names documents (by source; a string is
        one source) to search
        as if they were not indexed — in L0 and in both legs: how the gate's calibration makes
        a near-domain question from an answerable one. `caller` names who asked, in the audit
        (cli, http:<key id>, eval…; default python)."""
        request = checked_request(self.settings, query, kb_scope, mode)
        timer = _Timer()
        t0 = time.perf_counter()
        targets = self.targets(request.kb_scope)
        left_out = excluded_sources(exclude)
        # L0 (SQL) needs no vector: it runs while the query is embedded (onnxruntime lets go of the GIL)
        l0 = _L0.submit(self._navigate, request.query, [tg.kb_scope for tg in targets], left_out)
        cals = {tg.kb_scope: self.calibrations[tg.kb_scope] for tg in targets}
        vectors, early = self._embed_query(request.query, targets, self._judged(targets, cals), timer)
        nav, timer.timings["l0"] = l0.result()
        run = _Run(request, targets, vectors, self._spec(request.mode, depth, left_out), cals, nav, timer)
        run.embeds = early
        selected = with_fallback(
            lambda name, category: self._attempt(run, name, category),
            nav.category_filter,
            self.settings.fallback_enabled,
        )
        t = time.perf_counter()
        evidence, rerank_trace = run_rerank(self.reranker, request.query, selected.processed.evidence)
        t = timer.stage("rerank", t)
        context = pack(evidence, self.settings.context_char_budget)
        timer.stage("pack", t)
        timer.timings["total"] = round((time.perf_counter() - t0) * 1000, 3)
        result = assemble(request, selected, evidence, context, nav, cals, timer.timings, rerank_trace)
        result.retrieval_trace.models = {tg.kb_scope: tg.model_id for tg in targets}
        result.candidates = run.candidates
        return write_audit(
            self.stores.sql,
            result,
            caller=caller,
            vectors=vectors,
            store_queries=self.settings.audit_store_queries,
        )
