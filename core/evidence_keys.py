"""Evidence keys: `<source>#<chunk index>`, one `#` per key.

A source may be a URL with a fragment (`https://wiki/page#setup`). Its `#` and `%` are
percent-escaped in the key (`https://wiki/page%23setup#2`), so splitting a key at its only `#`
gives the source back whoever splits it. Keys stored before the escaping (audit rows, baselines)
still read: a key with more than one `#` is one of those, and its last `#` ends the source.
"""

from __future__ import annotations

import re

_ESCAPED = re.compile("%(25|23)")


def evidence_key(source: str, chunk_index: int) -> str:
    return f"{source.replace('%', '%25').replace('#', '%23')}#{chunk_index}"


def source_of(key: str) -> str:
    """The source an evidence key names, today's keys and the unescaped keys stored before."""
    head = key.rpartition("#")[0] if "#" in key else key
    if "#" in head:  # an old key: the source was written as it is
        return head
    return _ESCAPED.sub(lambda m: "%" if m.group(1) == "25" else "#", head)
