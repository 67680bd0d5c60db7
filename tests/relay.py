"""An HTTP relay on 127.0.0.1 between Kinesis clients and a Kinesis server, that refuses part of each PutRecords.

No local server throttles: the relay makes it real for any client in any process (a Spark
executor, say). For each PutRecords it forwards the entries it lets through and answers the
others as a throttled shard does (``ProvisionedThroughputExceededException`` in their place
in ``Records``, counted in ``FailedRecordCount``); it can also refuse whole calls. An entry is
refused at most once (by its data), so every record goes in on a retry. Other calls pass as
they are.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["KinesisRelay"]

_THROTTLED = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded (injected)"}


class KinesisRelay:
    """``refuse(index)``: whether the entry at ``index`` of a call is refused (the first time its data is seen);
    ``throttle_call(n)``: whether the n-th PutRecords call (from 1) is refused as a whole."""

    def __init__(
        self,
        upstream: str,
        refuse: Callable[[int], bool] = lambda index: False,
        throttle_call: Callable[[int], bool] = lambda n: False,
    ) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._refuse, self._throttle_call = refuse, throttle_call
        self._lock = threading.Lock()
        self._seen: set[bytes] = set()
        self.refused_data: list[bytes] = []  # the data of each entry refused, as sent
        self.calls = self.refused_entries = self.refused_calls = 0
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, headers, answer = relay._relay(self.headers, body)
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="kinesis-relay", daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> KinesisRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _relay(self, headers: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        if not str(headers.get("X-Amz-Target", "")).endswith(".PutRecords"):
            return self._forward(headers, body)
        with self._lock:
            self.calls += 1
            whole = self._throttle_call(self.calls)
            if whole:
                self.refused_calls += 1
        if whole:
            error = {"__type": "ProvisionedThroughputExceededException", "message": "Rate exceeded (injected)"}
            return 400, [("Content-Type", "application/x-amz-json-1.1")], json.dumps(error).encode()
        request = json.loads(body)
        entries = request["Records"]
        refused = set()
        with self._lock:
            for index, entry in enumerate(entries):
                digest = hashlib.sha256(entry["Data"].encode()).digest()
                if digest not in self._seen:
                    self._seen.add(digest)
                    if self._refuse(index):
                        refused.add(index)
                        self.refused_data.append(base64.b64decode(entry["Data"]))
            self.refused_entries += len(refused)
        if not refused:
            return self._forward(headers, body)
        kept = [entry for index, entry in enumerate(entries) if index not in refused]
        results: list[dict[str, Any]] = []
        failed = len(refused)
        status, answer_headers = 200, [("Content-Type", "application/x-amz-json-1.1")]
        if kept:
            status, answer_headers, answer = self._forward(headers, json.dumps({**request, "Records": kept}).encode())
            if status != 200:
                return status, answer_headers, answer
            parsed = json.loads(answer)
            results, failed = parsed["Records"], failed + int(parsed.get("FailedRecordCount", 0))
        through = iter(results)
        merged = [dict(_THROTTLED) if index in refused else next(through) for index in range(len(entries))]
        return status, answer_headers, json.dumps({"FailedRecordCount": failed, "Records": merged}).encode()

    def _forward(self, headers: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            sent = {name: value for name, value in headers.items() if name.lower() not in ("host", "content-length")}
            connection.request("POST", "/", body=body, headers=sent)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()
