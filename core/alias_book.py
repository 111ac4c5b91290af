"""Aliases kept by kbflow, for engines that have none (Milvus Lite 2.5 answers UNIMPLEMENTED).

A scope's stable alias names its physical collection. On a Milvus server that is a Milvus
alias. On Milvus Lite the pairs live in one small collection of the same store,
`kbflow_aliases`, one row per alias: moving an alias is one upsert of one row, read back with
Strong consistency, so a lookup sees the old collection or the new one and never a half-built
one. The book sits beside the collections it names: a store copied, restored or wiped takes its
aliases with it.
"""

from __future__ import annotations

import logging
from typing import Any

from pymilvus import DataType, MilvusClient

from kbflow.core.validation import eq

BOOK = "kbflow_aliases"
_STRONG = "Strong"


def has_native_aliases(client: MilvusClient) -> bool:
    """Whether the engine keeps aliases itself (a Milvus server) or not (Milvus Lite 2.5)."""
    rpc_log = logging.getLogger("pymilvus.decorators")  # logs the refusal with a traceback
    level = rpc_log.level
    rpc_log.setLevel(logging.CRITICAL)
    try:
        client.list_aliases()
    except Exception as exc:  # pymilvus wraps gRPC's UNIMPLEMENTED in several types
        if "UNIMPLEMENTED" in str(exc).upper() or "not implemented" in str(exc).lower():
            return False
        raise
    finally:
        rpc_log.setLevel(level)
    return True


class AliasBook:
    """alias -> physical collection, in a collection of the store itself."""

    def __init__(self, client: MilvusClient) -> None:
        self.client = client
        self._ready = False

    def _ensure(self) -> None:
        if self._ready:
            return
        if BOOK not in self.client.list_collections():
            schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("alias", DataType.VARCHAR, is_primary=True, max_length=255)
            schema.add_field("target", DataType.VARCHAR, max_length=255)
            schema.add_field("v", DataType.FLOAT_VECTOR, dim=2)  # Milvus wants one vector field
            index = self.client.prepare_index_params()
            index.add_index("v", index_type="FLAT", metric_type="L2")
            self.client.create_collection(
                BOOK, schema=schema, index_params=index, consistency_level=_STRONG
            )
        self.client.load_collection(BOOK)
        self._ready = True

    def target(self, alias: str) -> str | None:
        self._ensure()
        rows = self.client.query(
            BOOK, filter=eq("alias", alias), output_fields=["target"], consistency_level=_STRONG
        )
        return str(rows[0]["target"]) if rows else None

    def point(self, alias: str, physical: str) -> None:
        self._ensure()
        self.client.upsert(BOOK, [{"alias": alias, "target": physical, "v": [0.0, 0.0]}])

    def drop(self, alias: str) -> None:
        self._ensure()
        self.client.delete(BOOK, filter=eq("alias", alias))

    def pointed_to(self) -> set[str]:
        self._ensure()
        rows: list[dict[str, Any]] = self.client.query(
            BOOK, filter='alias != ""', output_fields=["target"], consistency_level=_STRONG
        )
        return {str(r["target"]) for r in rows}
