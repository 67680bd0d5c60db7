"""An HTTP relay on 127.0.0.1 between Kinesis clients and a Kinesis server: it refuses part of each
PutRecords, and answers chosen GetRecords calls (or calls of any operation) with faults (throttling,
5xx, a cut connection).

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
import socket
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["KinesisRelay"]

_THROTTLED = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded (injected)"}
#: Faults by name: the answer the relay gives instead of forwarding ("cut": no answer at all).
_FAULTS = {
    "throttled": (400, {"__type": "ProvisionedThroughputExceededException", "message": "Rate exceeded (injected)"}),
    "5xx": (500, {"__type": "InternalFailure", "message": "injected"}),
    "503": (503, {}),
}


class KinesisRelay:
    """``refuse(index)``: whether the entry at ``index`` of a call is refused (the first time its data is seen);
    ``throttle_call(n)``: whether the n-th PutRecords call (from 1) is refused as a whole;
    ``get_records_fault(n)``: the fault of the n-th GetRecords call (from 1): "throttled", "5xx", "503",
    "cut", or None to forward it; ``call_fault(operation, n)``: the same for the n-th call (from 1) of
    any other operation (``"DescribeStreamSummary"``, ``"DescribeTable"``...; DynamoDB's too, for a
    server that serves both). ``faults`` lists (operation, fault) of those others, in order.
    ``answer(operation, answer)``: what a successful JSON answer of any forwarded call becomes (the
    records retention trimmed left out of GetRecords, say; default: as it is)."""

    def __init__(
        self,
        upstream: str,
        refuse: Callable[[int], bool] = lambda index: False,
        throttle_call: Callable[[int], bool] = lambda n: False,
        get_records_fault: Callable[[int], str | None] = lambda n: None,
        call_fault: Callable[[str, int], str | None] = lambda operation, n: None,
        answer: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self._upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._refuse, self._throttle_call, self._get_records_fault = refuse, throttle_call, get_records_fault
        self._call_fault = call_fault
        self._answer = answer
        self.get_records_calls = 0
        self.faults: list[str] = []  # the faults injected into GetRecords calls, in order
        self.call_faults: list[tuple[str, str]] = []  # (operation, fault) injected into other calls, in order
        self._operation_calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._seen: set[bytes] = set()
        self.refused_data: list[bytes] = []  # the data of each entry refused, as sent
        self.calls = self.refused_entries = self.refused_calls = 0
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fault = relay._fault(self.headers)
                if fault == "cut":  # the connection breaks before any answer
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, headers, answer = relay._relay(self.headers, body, fault)
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

    def _fault(self, headers: Any) -> str | None:
        """The fault injected into this call (counted either way)."""
        operation = str(headers.get("X-Amz-Target", "")).rpartition(".")[2]
        if operation != "GetRecords":
            with self._lock:
                n = self._operation_calls[operation] = self._operation_calls.get(operation, 0) + 1
                fault = self._call_fault(operation, n)
                if fault is not None:
                    self.call_faults.append((operation, fault))
            return fault
        with self._lock:
            self.get_records_calls += 1
            fault = self._get_records_fault(self.get_records_calls)
            if fault is not None:
                self.faults.append(fault)
        return fault

    def _relay(self, headers: Any, body: bytes, fault: str | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
        target = str(headers.get("X-Amz-Target", ""))
        if fault in _FAULTS:
            status, error = _FAULTS[fault]
            return status, [("Content-Type", "application/x-amz-json-1.1")], json.dumps(error).encode()
        if not target.endswith(".PutRecords"):
            status, answer_headers, answer = self._forward(headers, body)
            if self._answer is None or status != 200 or not answer:
                return status, answer_headers, answer
            changed = self._answer(target.rpartition(".")[2], json.loads(answer))
            return status, answer_headers, json.dumps(changed).encode()
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
