"""Lexical analysis done in our own code, before text reaches Milvus's BM25 function.

Milvus Lite accepts the `stop` and `stemmer` filters and silently ignores them, while a Milvus
server applies them: analysing here makes BM25 behave the same on both. The same function runs
on chunks (at write time, into the `lexical` field) and on queries (at search time).

English: lowercase, drop stop words, Snowball-stem, and split identifiers. `KubePodCrashLooping`,
`max_connections`, `kube-proxy` and `net.ipv4.tcp_tw_reuse` are indexed whole (separators
removed) *and* as their stemmed parts, so "crash looping" meets `KubePodCrashLooping` and the
exact identifier still scores higher than its parts alone. Chinese scopes keep Milvus's jieba
tokenizer: their text passes through unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# CJK ideographs (extension A, unified, compatibility): the one definition of "Chinese text"
# for language detection, quality signals and L0 terms
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


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


def analyze(text: str, split_ids: bool = True) -> str:
    """The English analysis as a space-separated token string (what the BM25 field indexes)."""
    tokens: list[str] = []
    for raw in _TOKEN.findall(text):
        tokens.extend(_terms(raw, split_ids))
    return " ".join(tokens)


@dataclass(frozen=True)
class LexicalConfig:
    """How a scope's BM25 side was built; stored per scope (`ScopeRow.analysis`) so queries are
    analysed the way the scope's chunks were, and a change forces exactly a rebuild."""

    mode: str = "stem+ids"
    fields: bool = True

    @property
    def version(self) -> str:
        return f"{self.mode}{'+fields' if self.fields else ''}/2"

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
