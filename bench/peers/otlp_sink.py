"""A local OTLP/HTTP sink for bench/a2a_front.py --tracing: accepts `POST /v1/traces`
and answers 200 with an empty `ExportTraceServiceResponse`, counting requests and bytes
(its own process, so its work is not charged to the bridge or to the bench's client).

    python otlp_sink.py        # prints "PORT <n>", serves until killed; GET / → {"requests", "bytes"}
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COUNTS = {"requests": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's session expects

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        COUNTS["requests"] += 1
        COUNTS["bytes"] += length
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")  # an empty ExportTraceServiceResponse encodes to no bytes
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        body = json.dumps(COUNTS).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    print(f"PORT {server.server_address[1]}", flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
