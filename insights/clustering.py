"""Grouping questions by meaning, and naming a group by its salient terms (numpy, scipy).

Two methods, compared by `python bench/gaps.py` on seeded audits in English and Chinese
(purity of the 5 largest groups, whether they are the 5 seeded topics, seconds):
- `average`: average-linkage agglomerative clustering cut at a cosine (scipy); it found the
  topics over the widest range of thresholds in both languages, but holds n² distances, so it
  serves up to `AVERAGE_MAX` distinct questions;
- `leader`: one pass in arrival order (a question joins the nearest group whose centroid is
  within the threshold, or starts one), then every question moves to its nearest centroid
  once; O(n · groups), but its groups depend on arrival order (in Chinese it found the topics
  at one threshold of six);
- `two-stage`: leader at a tight threshold, then average linkage over those groups' centroids.
`auto` picks average when it fits, two-stage beyond. All work on centred embeddings (`centered`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from kbflow.core.analysis import STOPWORDS, ZH_STOPWORDS, analyze_terms, chinese_terms

METHODS = ("auto", "average", "leader", "two-stage")
DEFAULT_METHOD = "auto"
# centred cosines, each in the middle of the range that found the 5 seeded topics in both
# languages (bench/gaps.py: average 0.15-0.3; leader 0.3 only in Chinese, 0.15-0.35 in English)
THRESHOLDS = {"average": 0.2, "leader": 0.3, "two-stage": 0.2}
FINE = 0.5  # two-stage: the leader pass's threshold, tight enough that a group is one topic
AVERAGE_MAX = 5000
_WORD = re.compile(r"[^\W_]+(?:[._\-][^\W_]+)*")
_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
_LETTERS = re.compile(r"[^\W_\u3400-\u9fff\uf900-\ufaff]+(?:['._\-][^\W_\u3400-\u9fff\uf900-\ufaff]+)*")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    x = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def leader(vectors: np.ndarray, threshold: float = THRESHOLDS["leader"]) -> np.ndarray:
    """Group labels 0..k-1 for unit rows; see the module's docstring."""
    x = unit_rows(vectors)
    n = len(x)
    labels = np.empty(n, dtype=np.int64)
    sums = np.zeros_like(x)
    centroids = np.zeros_like(x)
    k = 0
    for i in range(n):
        if k:
            sims = centroids[:k] @ x[i]
            best = int(np.argmax(sims))
            if sims[best] >= threshold:
                labels[i] = best
                sums[best] += x[i]
                centroids[best] = sums[best] / np.linalg.norm(sums[best])
                continue
        labels[i], sums[k], centroids[k] = k, x[i], x[i]
        k += 1
    if k > 1:  # one reassignment: early arrivals may sit closer to a group formed after them
        labels = np.argmax(x @ centroids[:k].T, axis=1)
    _, dense = np.unique(labels, return_inverse=True)
    return dense.astype(np.int64)


def average(vectors: np.ndarray, threshold: float = THRESHOLDS["average"]) -> np.ndarray:
    if len(vectors) > AVERAGE_MAX:
        raise ValueError(f"average linkage holds n² distances: at most {AVERAGE_MAX} questions")
    if len(vectors) < 2:
        return np.zeros(len(vectors), dtype=np.int64)
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(unit_rows(vectors), method="average", metric="cosine")
    return fcluster(tree, t=1 - threshold, criterion="distance").astype(np.int64) - 1


# Questions from everywhere but operations, in both languages: with the window's own questions
# they estimate the direction a model gives every text, which `centered` takes away.
REFERENCE_QUESTIONS = (
    "how long should I boil an egg",
    "what is the capital of australia",
    "best way to learn the piano as an adult",
    "how do I file my tax return late",
    "why is the sky blue",
    "recommended dose of vitamin d for adults",
    "how to train a puppy to sit",
    "cheapest time of year to fly to japan",
    "what causes inflation to rise",
    "how to grow tomatoes on a balcony",
    "rules of the offside in football",
    "how do vaccines work",
    "tips for writing a cover letter",
    "what is the plot of hamlet",
    "how many calories does running burn",
    "how to remove a red wine stain",
    "what is a mortgage interest rate",
    "how do solar panels produce electricity",
    "history of the roman empire in brief",
    "how to change a flat bicycle tire",
    "红烧肉怎么做才好吃",
    "去日本旅游需要办签证吗",
    "怎么提高英语口语水平",
    "新手如何开始理财",
    "感冒了应该吃什么药",
    "猫咪不吃东西怎么办",
    "高考志愿怎么填报",
    "北京有哪些好玩的地方",
    "如何养好一盆绿萝",
    "跑步膝盖疼是什么原因",
    "个人所得税怎么申报",
    "电动车冬天续航为什么变短",
    "孩子不爱学习怎么办",
    "失眠有什么好办法",
    "二手房买卖要交哪些税",
    "怎么挑选新鲜的西瓜",
    "唐朝有哪些著名诗人",
    "健身增肌应该怎么吃",
    "手机内存不够怎么清理",
    "怎么写一份好的简历",
)


def two_stage(vectors: np.ndarray, threshold: float = THRESHOLDS["two-stage"]) -> np.ndarray:
    """Leader at a tight threshold (many small, pure groups), then average linkage over their
    centroids at `threshold`: average linkage's grouping at leader's cost."""
    x = unit_rows(vectors)
    fine = leader(x, FINE)
    k = int(fine.max()) + 1 if len(fine) else 0
    if k > AVERAGE_MAX:  # still too many: leader's own grouping
        return leader(x, THRESHOLDS["leader"])
    sums = np.zeros((k, x.shape[1]), dtype=np.float32)
    np.add.at(sums, fine, x)
    return average(unit_rows(sums), threshold)[fine]


def centered(vectors: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """Unit rows less the direction the model gives every text. Models differ in how much all
    texts share: two unrelated questions score cosine 0.3 under all-MiniLM-L6-v2 and 0.85 under
    multilingual-e5-small; without that shared part one threshold serves both. The direction is
    the mean of these rows and of `reference` (the same model's REFERENCE_QUESTIONS), so that a
    window of two or three questions is not pulled apart by its own mean."""
    x = unit_rows(vectors)
    pool = x if reference is None else np.vstack([x, unit_rows(reference)])
    return unit_rows(x - pool.mean(axis=0))


def cluster(
    vectors: np.ndarray,
    method: str = DEFAULT_METHOD,
    threshold: float | None = None,
    reference: np.ndarray | None = None,
) -> np.ndarray:
    """Group labels; with `reference` (see `centered`) the threshold is on centred cosines.
    `threshold` None = the method's measured default."""
    if method not in METHODS:
        raise ValueError(f"unknown clustering method {method!r}: use one of {', '.join(METHODS)}")
    if len(vectors) == 0:
        return np.zeros(0, dtype=np.int64)
    if method == "auto":
        method = "average" if len(vectors) <= AVERAGE_MAX else "two-stage"
    x = vectors if reference is None else centered(vectors, reference)
    t = THRESHOLDS[method] if threshold is None else threshold
    return {"leader": leader, "average": average, "two-stage": two_stage}[method](x, t)


def words(text: str) -> list[str]:
    """Content words as a person would read them: lowercase, stop words out, Chinese cut."""
    out: list[str] = []
    for token in _WORD.findall(text.lower()):
        if _CJK_RUN.search(token):
            out.extend(w for run in _CJK_RUN.findall(token) for w in chinese_terms(run) if len(w) > 1)
        elif token not in STOPWORDS and len(token) > 1 and not token.isdigit():
            out.append(token)
    return [w for w in out if w not in ZH_STOPWORDS]


def without_terms(text: str, terms: frozenset[str]) -> str:
    """`text` less the words whose analysed terms all lie in `terms` (the scope's everywhere
    terms): "ledgerd settlement batch failed" -> "settlement batch failed". Chinese terms are cut
    out where they occur. The text as it was when nothing would be left."""
    if not terms:
        return text

    def drop(word: re.Match) -> str:
        analysed = analyze_terms(word.group())
        return " " if analysed and set(analysed) <= terms else word.group()

    out = _LETTERS.sub(drop, text)
    for term in sorted((t for t in terms if len(t) > 1 and _CJK_RUN.fullmatch(t)), key=len, reverse=True):
        out = out.replace(term, " ")
    out = re.sub(r"\s+", " ", out).strip()
    return out if words(out) else text


def salient_terms(groups: Sequence[Sequence[str]], top: int = 3) -> list[list[str]]:
    """For each group of texts, the words most particular to it: how many of its texts use a
    word, weighted by how few groups use it (tf-idf over groups)."""
    counts = [Counter(w for text in texts for w in set(words(text))) for texts in groups]
    spread = Counter(w for c in counts for w in c)
    n = len(groups)
    out = []
    for c in counts:
        scored = sorted(c, key=lambda w: (-c[w] * math.log(1 + n / spread[w]), w))
        out.append(scored[:top])
    return out
