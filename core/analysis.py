r"""Lexical analysis done in our own code, before text reaches Milvus's BM25 function.

Milvus Lite accepts the `stop` and `stemmer` filters and silently ignores them, while a Milvus
server applies them: analysing here makes BM25 behave the same on both. The same function runs
on chunks (at write time, into the `lexical` field) and on queries (at search time).

English: lowercase, drop stop words, Snowball-stem, and split identifiers. `KubePodCrashLooping`,
`max_connections`, `kube-proxy` and `net.ipv4.tcp_tw_reuse` are indexed whole (separators
removed) *and* as their stemmed parts, so "crash looping" meets `KubePodCrashLooping` and the
exact identifier still scores higher than its parts alone.

Chinese, in the same pass: full-width forms are folded to half-width (`ＳＱＬ，` → `SQL,`), each
run of CJK ideographs is cut by jieba in search mode (a word and its dictionary sub-words:
`连接池` → `连接 连接池`) and Chinese stop words are dropped; everything between the runs is
analysed as English, so `Broker Load`, `max_compaction_score`, `ERROR 1064` and `fe.conf` inside
Chinese text are identifiers as anywhere else. Every token is letters and digits only, so
Milvus's `standard` tokenizer (Lite: `\w+`; a server: alphanumeric runs) indexes exactly these
tokens on both. `LexicalConfig("lowercase")` still hands raw text to Milvus's own analyzer
(its jieba tokenizer for Chinese scopes), for comparison.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# CJK ideographs (extension A, unified, compatibility): the one definition of "Chinese text"
# for language detection, quality signals and L0 terms
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
# full-width ASCII (U+FF01-FF5E) and the ideographic space, folded to their half-width forms
_HALF_WIDTH = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def has_cjk(text: str) -> bool:
    return bool(CJK.search(text))


LEXICAL_MODES = ("stem+ids", "stem", "lowercase")  # lowercase = Milvus's analyzer only

# A token: letters/digits, optionally joined by identifier separators (`.`, `_`, `-`).
_TOKEN = re.compile(r"[^\W_]+(?:[._\-]+[^\W_]+)*")
_SEP = re.compile(r"[._\-]+")
# CamelCase parts: an acronym run (OOM in OOMKilled), a capitalised word, a lowercase/digit run.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+[a-z]*")

# English stop words (the common IR list; negations kept out would change meaning rarely here).
STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself let's me more most mustn't my myself nor of off on once only or
    other ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't
    so some such than that that's the their theirs them themselves then there there's these they
    they'd they'll they're they've this those through to too under until up very was wasn't we
    we'd we'll we're we've were weren't what what's when when's where where's which while who
    who's whom why why's with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves s t d ll m re ve""".split()
)


# Chinese function words, pronouns, particles and question words: what a question says about
# itself, never what it asks about (a common IR list, trimmed to words jieba emits).
ZH_STOPWORDS = frozenset(
    """的 地 得 了 着 过 是 在 和 与 及 或 而 并 且 也 还 都 就 又 才 只 被 把 将 对 于 从 向 以 为
    给 让 这 那 这个 那个 这些 那些 这样 那样 这种 那种 这里 那里 哪 哪个 哪些 哪里 哪儿 什么 怎么
    怎么办 怎样 怎么样 如何 为什么 为何 是否 是不是 能否 吗 呢 吧 啊 呀 哦 嘛 么 啦 我 你 您 他 她
    它 我们 你们 他们 它们 咱们 自己 其 其中 之 所 一个 一些 一下 一直 一种 个 些 有 有没有 没有
    会 能 能够 可以 可 要 需要 应该 请问 请 想 如果 但是 但 然后 所以 因为 虽然 以及 或者 还是
    很 非常 比较 更 最 太 已经 时 时候 的话 等 等等 即 即可 之后 之前 里 中 上 下""".split()
)


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer  # PyStemmer: the Snowball algorithms in C

    return Stemmer.Stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


def split_identifier(token: str) -> list[str]:
    """Parts of an identifier: on `.`, `_`, `-` and CamelCase boundaries, lowercased."""
    parts: list[str] = []
    for piece in _SEP.split(token):
        if not piece:
            continue
        found = _CAMEL.findall(piece) if piece.isascii() else []
        parts.extend(p.lower() for p in (found or [piece]))
    return parts


def _terms(token: str, split_ids: bool) -> list[str]:
    parts = split_identifier(token) if split_ids else [token.lower()]
    out: list[str] = []
    if len(parts) > 1:
        out.append("".join(parts))  # the identifier whole, unstemmed
    for p in parts:
        if p in STOPWORDS or not p:
            continue
        out.append(p if p.isdigit() else _stem(p))
    return out


def fold_width(text: str) -> str:
    """Full-width letters, digits and punctuation as their ASCII forms."""
    return text.translate(_HALF_WIDTH)


def _english(text: str, split_ids: bool, out: list[str]) -> None:
    for raw in _TOKEN.findall(text):
        out.extend(_terms(raw, split_ids))


def analyze(text: str, split_ids: bool = True) -> str:
    """The analysis as a space-separated token string (what the BM25 field indexes): English
    terms, and jieba search-mode words for each run of Chinese characters."""
    tokens: list[str] = []
    if not CJK.search(text):
        _english(text, split_ids, tokens)
        return " ".join(tokens)
    text, pos = fold_width(text), 0
    for run in _CJK_RUN.finditer(text):
        _english(text[pos : run.start()], split_ids, tokens)
        tokens.extend(chinese_terms(run.group()))
        pos = run.end()
    _english(text[pos:], split_ids, tokens)
    return " ".join(tokens)


@lru_cache(maxsize=1)
def jieba_module():
    """jieba, its dictionary loaded once and its "Building prefix dict…" notes kept off stderr
    (every kbflow use of jieba goes through here)."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


@lru_cache(maxsize=65536)
def chinese_terms(run: str) -> tuple[str, ...]:
    """A run of Chinese characters as jieba search-mode words, stop words dropped."""
    return tuple(w for w in jieba_module().cut_for_search(run) if w not in ZH_STOPWORDS)


@dataclass(frozen=True)
class LexicalConfig:
    """How a scope's BM25 side was built; stored per scope (`ScopeRow.analysis`) so queries are
    analysed the way the scope's chunks were, and a change forces exactly a rebuild."""

    mode: str = "stem+ids"
    fields: bool = True

    @property
    def version(self) -> str:
        # /3: Chinese runs are cut by kbflow (jieba search mode, stop words, full-width folded)
        return f"{self.mode}{'+fields' if self.fields else ''}/3"

    def tokenizer(self, analyzer: str) -> str:
        """The Milvus tokenizer of the BM25 field: `standard` reads kbflow's tokens as they are;
        Milvus's own jieba only where Chinese text reaches it raw (`lowercase`)."""
        return "jieba" if analyzer == "jieba" and self.mode == "lowercase" else "standard"

    @classmethod
    def parse(cls, version: str | None) -> LexicalConfig | None:
        """None for a scope built before kbflow analysed text itself (BM25 on the raw text)."""
        if not version:
            return None
        body = version.split("/", 1)[0]
        fields = body.endswith("+fields")
        mode = body.removesuffix("+fields")
        return cls(mode if mode in LEXICAL_MODES else "lowercase", fields)

    def _analyze(self, text: str) -> str:
        if self.mode == "lowercase":
            return text
        return analyze(text, split_ids=self.mode == "stem+ids")

    def index_text(self, title: str, breadcrumb: str, text: str) -> str:
        """A chunk's lexical document. With fields, its title and breadcrumb take part in the
        match. The chunk text starts with its heading path, which usually starts with the
        title already: adding it again would count the title twice."""
        parts = [text]
        if self.fields:
            crumb = breadcrumb.replace(">", " ")
            parts = [crumb, text] if not title or text.startswith(title) else [title, crumb, text]
        return self._analyze("\n".join(p for p in parts if p))

    def query_text(self, query: str) -> str:
        return self._analyze(query)


def analyze_terms(text: str) -> list[str]:
    return analyze(text).split()


_FIELDS = LexicalConfig("stem+ids", True)


@lru_cache(maxsize=8192)
def chunk_terms(title: str, breadcrumb: str, text: str) -> frozenset[str]:
    """A chunk's analysed terms (stemmed, identifiers split, title and breadcrumb included): what
    the gate's coverage reads and what a scope's vocabulary counts. Cached, since the same chunks
    come back across lookups."""
    return frozenset(_FIELDS.index_text(title, breadcrumb, text).split())
