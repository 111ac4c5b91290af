"""Does the evidence cover what the question asks about? The signals a level needs.

Quality (`gate.py`) decides whether a candidate is usable evidence at all. A REFERENCE or
PRECISE level asks more: that the evidence covers the question. In a knowledge base about one
product, the product's name is in every document, so a question about a feature the documents
never mention still matches the product's name and lands close in embedding space. Three
signals look at the question word by word instead:

- each content word's *importance* to the question: how far the question's embedding moves
  when the word is left out (1 - cosine of the question with and without it);
- `specific`: the importance-weighted share of the question's words the chunk contains, counting
  only words whose terms are not in every document of the scope (the scope's vocabulary);
- `support`: the importance-weighted share of the words the chunk contains or relies on (its
  cosine to the question drops when the word is left out);
- `unknown`: the importance-weighted share of the words no document of the scope has;
- `salient`: the share of the question's analysed terms the chunk has, each weighted by its idf
  in the scope (a term every document has weighs next to nothing, one none has the most).

The words' embeddings cost one batch through the query model (one text per word, at most
`MAX_WORDS`). They need only the question's text, so a lookup starts them beside the query's own
embedding (`embed_early`) rather than after the search: the batch is off the critical path, at
the price of a wasted batch when no evidence turns out usable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from kbflow.core.analysis import CJK, jieba_module
from kbflow.core.vocabulary import Vocabulary
from kbflow.retrieval.gate import query_terms
from kbflow.retrieval.quality import STOPWORDS

MAX_WORDS = 16  # words whose importance is measured (one embedding each); the rest count 0
SIGNALS = ("specific", "support", "unknown", "salient")
_WORD = re.compile(r"[\w][\w.\-/:=]*", re.UNICODE)


@dataclass(frozen=True)
class Word:
    text: str
    start: int
    end: int
    terms: frozenset[str]  # analysed the way chunks are


def query_words(query: str) -> list[Word]:
    """The question's content words with their places: jieba words for Chinese text, word
    tokens otherwise; stop words and single characters dropped."""
    if CJK.search(query):
        spans, pos = [], 0
        for w in jieba_module().cut(query):
            start = query.find(w, pos)
            spans.append((w, start, start + len(w)))
            pos = start + len(w)
        found = [(w, a, b) for w, a, b in spans if len(w.strip()) >= 2 and (CJK.search(w) or _WORD.match(w))]
    else:
        found = [(m.group(0), m.start(), m.end()) for m in _WORD.finditer(query)]
    words = [Word(w, a, b, frozenset(query_terms(w))) for w, a, b in found
             if len(w) >= 2 and w.lower() not in STOPWORDS]
    return words[:MAX_WORDS]


def asked_terms(query: str) -> set[str]:
    """Every term whose document frequency the signals of this question read."""
    words = query_words(query)
    return set(query_terms(query)) | {t for w in words for t in w.terms} | {joined(w) for w in words}


def without(query: str, word: Word) -> str:
    return " ".join((query[: word.start] + query[word.end :]).split())


@dataclass(frozen=True)
class Profile:
    """A question as the support signals see it: its words, what leaving each out does to its
    embedding, and which words the scope lacks."""

    words: list[Word]
    importance: np.ndarray  # per word, >= 0
    left_out: np.ndarray  # the question's embedding without each word (rows)
    terms: frozenset[str] = frozenset()  # the question's analysed terms



_EARLY = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kbflow-support")


def left_out_texts(query: str) -> list[str]:
    """The question once without each of its words: what `profile` embeds."""
    return [without(query, w) for w in query_words(query)]


def embed_early(
    query: str, embed: Callable[[list[str]], np.ndarray], parts: int = 1
) -> Callable[[list[str]], np.ndarray]:
    """`embed`, with the question's left-out texts already on their way in other threads (the
    encoder lets go of the GIL), in up to `parts` batches at once: `profile` then only collects
    them. On an idle machine the parts share its cores; on a busy one they cost what one would."""
    texts = left_out_texts(query)
    if not texts:
        return embed
    n = max(1, min(parts, len(texts)))
    futures = [_EARLY.submit(embed, texts[k * len(texts) // n : (k + 1) * len(texts) // n]) for k in range(n)]

    def collect(asked: list[str]) -> np.ndarray:
        return np.concatenate([f.result() for f in futures]) if asked == texts else embed(asked)

    return collect


def profile(query: str, vector: np.ndarray, embed: Callable[[list[str]], np.ndarray]) -> Profile:
    words, terms = query_words(query), frozenset(query_terms(query))
    if not words:
        return Profile([], np.zeros(0), np.zeros((0, len(vector)), dtype=np.float32), terms)
    left_out = np.asarray(embed([without(query, w) for w in words]), dtype=np.float32)
    importance = np.maximum(1.0 - left_out @ np.asarray(vector, dtype=np.float32), 1e-4)
    return Profile(words, importance, left_out, terms)


def salient(terms: frozenset[str], chunk: frozenset[str], vocab: Vocabulary) -> float:
    """The idf-weighted share of the question's terms the chunk has (BM25's idf, as Milvus
    computes it, over the scope's documents)."""
    weights = {t: math.log(1.0 + (vocab.docs - vocab.df.get(t, 0) + 0.5) / (vocab.df.get(t, 0) + 0.5))
               for t in terms}
    total = sum(weights.values())
    return round(sum(w for t, w in weights.items() if t in chunk) / total, 4) if total else 0.0


def joined(word: Word) -> str:
    """The word as one term (an identifier such as `mysql_native_password` analyses to its parts
    and to `mysqlnativepassword`)."""
    return "".join(ch for ch in word.text.lower() if ch.isalnum())


def _absent(word: Word, vocab: Vocabulary) -> bool:
    """No document of the scope has the word: its joined form or every one of its terms."""
    if not word.terms or vocab.docs == 0:
        return False
    one = joined(word)
    return (one in word.terms and vocab.absent(one)) or all(vocab.absent(t) for t in word.terms)


def signals(
    prof: Profile,
    vector: np.ndarray,
    chunk_vector: Sequence[float] | None,
    terms: frozenset[str],
    vocab: Vocabulary,
) -> dict[str, float]:
    """The coverage signals of one chunk (its stored vector and analysed terms) for the question."""
    if not prof.words:
        return {"specific": 0.0, "support": 0.0, "unknown": 0.0, "salient": salient(prof.terms, terms, vocab)}
    imp = prof.importance
    total = float(imp.sum())
    contains = np.array([bool(w.terms & terms) for w in prof.words])
    specific = np.array([any(not vocab.everywhere(t) for t in w.terms & terms) for w in prof.words])
    relies = np.zeros(len(prof.words), dtype=bool)
    if chunk_vector is not None and len(chunk_vector):
        c = np.asarray(chunk_vector, dtype=np.float32)
        relies = (float(np.asarray(vector, dtype=np.float32) @ c) - prof.left_out @ c) > 0
    absent = np.array([_absent(w, vocab) for w in prof.words])
    return {
        "specific": round(float(imp[specific].sum()) / total, 4),
        "support": round(float(imp[contains | relies].sum()) / total, 4),
        "unknown": round(float(imp[absent].sum()) / total, 4),
        "salient": salient(prof.terms, terms, vocab),
    }


def uncovered(prof: Profile, terms: frozenset[str], vocab: Vocabulary, top: int = 3) -> list[str]:
    """The question's most important words that the chunk does not contain (for the reader:
    what the evidence does not cover), most important first."""
    order = np.argsort(-prof.importance) if prof.words else []
    out = []
    for i in order:
        w = prof.words[int(i)]
        if w.terms and not (w.terms & terms) and not all(vocab.everywhere(t) for t in w.terms):
            out.append(w.text)
        if len(out) >= top:
            break
    return out


def judge(
    cal: Any,
    quality: float,
    prof: Profile,
    vector: np.ndarray,
    chunk_vector: Sequence[float] | None,
    terms: frozenset[str],
    vocab: Vocabulary,
) -> dict[str, Any]:
    """A usable hit's coverage signals, the words it lacks and, when its calibration has a
    level model (`cal.judges_coverage`), its confidence. The signals are kept either way:
    `kbflow eval calibrate` fits a level model on them."""
    sig = signals(prof, vector, chunk_vector, terms, vocab)
    out: dict[str, Any] = {"signals": sig, "uncovered": uncovered(prof, terms, vocab)}
    if cal.judges_coverage:
        out["confidence"] = round(level_score(cal.levels["weights"], quality, sig), 4)
    return out


def level_score(weights: Mapping[str, float], quality: float, sig: Mapping[str, float]) -> float:
    """The level model: sigmoid(bias + w·[quality, specific, support, unknown, salient])."""
    z = weights.get("bias", 0.0) + weights.get("quality", 0.0) * quality
    z += sum(weights.get(k, 0.0) * sig.get(k, 0.0) for k in SIGNALS)
    return float(1.0 / (1.0 + np.exp(-max(-60.0, min(60.0, z)))))
