"""Typed contracts between the retrieval stages (SPEC §3).

JSON uses the camelCase names of the original design (`originalRank`, `evidenceKey`, …);
Python code uses snake_case. `RagToolResult` is the agent-facing projection and keeps its
snake_case wire names (`relevance_level`, `evidence_status`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

ScoreLabel = Literal["dense", "hybrid"]
RelevanceLevel = Literal["PRECISE", "REFERENCE"]
AttemptName = Literal["FILTERED_VECTOR", "UNFILTERED_VECTOR", "UNFILTERED_VECTOR_RETRY"]
FallbackReason = Literal["filtered_vector_low_quality", "filtered_vector_no_evidence"]

NO_EVIDENCE_MESSAGE = "No usable evidence in the knowledge base; continue with logs, metrics and alerts"


class Contract(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


class L0Navigation(Contract):
    category_filter: str | None = None
    domain_hints: list[str] = Field(default_factory=list)
    matched_keywords: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    l0_titles: list[str] = Field(default_factory=list)
    # "scope:doc_id" -> reasons such as l0_keyword_overlap; explains hits, never scores them
    doc_reasons: dict[str, list[str]] = Field(default_factory=dict)


class ChunkRef(Contract):
    """Where a chunk comes from; shared by candidates (Hit) and returned evidence."""

    evidence_key: str
    doc_id: str
    kb_scope: str
    source: str
    source_path: str = ""
    title: str = ""
    breadcrumb: str = ""
    heading_path: str = ""
    original_rank: int
    hit_reasons: list[str] = Field(default_factory=list)


class Hit(ChunkRef):
    """One candidate chunk as a search attempt returned it."""

    category: str = ""
    chunk_index: int = 0
    content: str = ""
    score: float
    score_label: ScoreLabel
    dense_distance: float | None = None
    dense_rank: int | None = None  # rank in the dense leg (None: that leg did not return it)
    sparse_rank: int | None = None  # rank in the BM25 leg
    sparse_score: float | None = None  # its BM25 score (magnitude; Milvus Lite reports it negative)
    quality_signal: Literal["dense", "lexical"] = "dense"
    quality_score: float | None = None
    signals: dict[str, float] = Field(default_factory=dict)  # what the quality was computed from
    # the level model's probability that it answers the question (usable evidence only)
    confidence: float | None = None
    uncovered: list[str] = Field(default_factory=list)  # the question's words it lacks, weightiest first
    vector: list[float] | None = Field(None, exclude=True, repr=False)  # its stored embedding

    @field_validator("score_label", mode="before")
    @classmethod
    def _canonical(cls, v: str) -> str:
        from kbflow.retrieval.quality import (
            canonical_label,  # legacy labels (l2_distance, bm25_only_no_dense…)
        )

        return canonical_label(v)


class Evidence(ChunkRef):
    excerpt: str
    quality_score: float
    weak: bool = False  # usable, but below the REFERENCE level: relevance none
    # the probability that it answers the question (the level model; None: levels read quality)
    confidence: float | None = None
    uncovered: list[str] = Field(default_factory=list)  # the question's weightiest words it lacks
    signals: dict[str, float] = Field(default_factory=dict)
    dense_rank: int | None = None  # its rank in the dense leg's list (None: not in it)
    sparse_rank: int | None = None  # its rank in the BM25 leg's list


class AttemptTrace(Contract):
    attempt: AttemptName
    query_used: str
    mode: Literal["hybrid", "dense", "bm25"]
    category_filter: str | None = None
    scopes: list[str] = Field(default_factory=list)
    candidate_count: int = 0
    top_quality: float | None = None
    low_quality: bool = True
    elapsed_ms: float = 0.0


class GateTrace(Contract):
    """The gate's decision in words, with what it was made from: the best candidate's signals
    and quality, the thresholds of its scope's calibration."""

    decision: str  # PRECISE | REFERENCE | weak evidence only | no usable evidence
    top_evidence_key: str | None = None
    top_signals: dict[str, float] = Field(default_factory=dict)
    top_quality: float | None = None
    # the logistic model's weights (bias first): quality = sigmoid(bias + sum weight * signal)
    weights: dict[str, float] = Field(default_factory=dict)
    floor: float | None = None
    reference: float | None = None
    precise: float | None = None
    # the level, from the first piece of evidence: confidence = sigmoid(bias + sum weight * signal)
    # over its quality and coverage signals; empty weights: the level reads quality
    first_evidence_key: str | None = None
    confidence: float | None = None
    level_weights: dict[str, float] = Field(default_factory=dict)
    level_signals: dict[str, float] = Field(default_factory=dict)
    uncovered: list[str] = Field(default_factory=list)


class RetrievalTrace(Contract):
    l0: L0Navigation
    attempts: list[AttemptTrace]
    selected_attempt: AttemptName
    fallback_reason: FallbackReason | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)
    calibrations: dict[str, str] = Field(default_factory=dict)  # scope -> the gate calibration used
    models: dict[str, str] = Field(default_factory=dict)  # scope -> the model id its query was embedded with
    gate: GateTrace | None = None


class RerankTrace(Contract):
    reranker: str
    applied: bool
    input_count: int
    output_count: int
    elapsed_ms: float = 0.0


class ContextPack(Contract):
    packed_text: str
    strategy: str
    char_budget: int
    used_chars: int
    included_sources: list[str]
    omitted_sources: list[str]


class LookupResult(Contract):
    query: str
    kb_scope: str | None
    mode: Literal["hybrid", "dense", "bm25"]
    found: bool
    evidence: list[Evidence]
    candidate_count: int
    returned_count: int
    relevance_level: RelevanceLevel | None
    completeness_hint: str
    message: str | None
    query_truncated: bool = False
    context: ContextPack
    retrieval_trace: RetrievalTrace
    rerank_trace: RerankTrace
    audit_id: int | None = None
    audit_error: str | None = None
    # every attempt's ranked candidates (quality filled in), for the eval; never serialized
    candidates: dict[str, list[Hit]] = Field(default_factory=dict, exclude=True)


class RagEvidence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    evidence_key: str
    document_id: str
    kb_scope: str = ""  # two scopes may hold the same source: they stay two documents
    source: str
    breadcrumb: str
    heading_path: str
    excerpt: str
    quality_score: float
    weak: bool = False  # usable but below the reference threshold: corroborate before acting


class RagToolResult(BaseModel):
    """What the agent sees: bounded, deduplicated, honest about every lossy step."""

    model_config = ConfigDict(extra="forbid")
    query: str
    evidence: list[RagEvidence]
    relevance_level: RelevanceLevel | None
    evidence_status: Literal["FOUND", "NO_EVIDENCE"]
    truncated: bool
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
