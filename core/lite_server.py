"""Milvus Lite's gRPC server, reachable only with a token: `python -m kbflow.core.lite_server`.

Milvus Lite's own `server` command answers any client on its port with every scope. kbflow
starts this one instead (the same servicer) with a gRPC interceptor that refuses every call whose
`authorization` header is not the token. The token reaches this process in its environment
(`KBFLOW_LITE_TOKEN`, not argv, which every user can read in /proc) and other kbflow processes
through `<home>/serve.json`, which only the owner can read.
"""

from __future__ import annotations

import argparse
import base64
import hmac
import os
import signal
import sys
from concurrent import futures

import grpc

TOKEN_ENV = "KBFLOW_LITE_TOKEN"


class TokenInterceptor(grpc.ServerInterceptor):
    """pymilvus sends `authorization: base64(token)` on every call when given a token."""

    def __init__(self, token: str) -> None:
        self._expected = base64.b64encode(token.encode()).decode()

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "kbflow: a token is required")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, handler_call_details):
        given = dict(handler_call_details.invocation_metadata or ()).get("authorization", "")
        if isinstance(given, bytes):
            given = given.decode("latin-1")
        if hmac.compare_digest(given.encode("latin-1", "replace"), self._expected.encode()):
            return continuation(handler_call_details)
        return self._deny


def run(data_dir: str, port: int, token: str) -> int:
    from milvus_lite.adapter.grpc.servicer import MilvusServicer
    from milvus_lite.db import MilvusLite
    from pymilvus.grpc_gen import milvus_pb2_grpc

    db = MilvusLite(data_dir)
    size = 256 * 1024 * 1024
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=10),
        interceptors=[TokenInterceptor(token)],
        options=[
            ("grpc.max_receive_message_length", size),
            ("grpc.max_send_message_length", size),
            # pymilvus pings every 10 s even when idle; gRPC's default answers that with GOAWAY
            # "too_many_pings", dropping an idle service's connection
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
            ("grpc.http2.max_ping_strikes", 0),
        ],
    )
    milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(db), server)
    if server.add_insecure_port(f"127.0.0.1:{port}") == 0:
        db.close()
        print(f"cannot bind 127.0.0.1:{port}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: server.stop(grace=5))
    server.start()
    try:
        server.wait_for_termination()
    finally:
        server.stop(grace=5)
        db.close()  # releases the data directory's lock
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        print(f"{TOKEN_ENV} is not set: refusing to serve without a token", file=sys.stderr)
        return 2
    return run(args.data_dir, args.port, token)


if __name__ == "__main__":
    sys.exit(main())
