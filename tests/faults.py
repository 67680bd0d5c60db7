"""Fault injection with botocore event hooks: fake error answers, parsed by botocore as real ones."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from botocore.awsrequest import AWSResponse

_STATUS = {
    "ProvisionedThroughputExceededException": 400,
    "ThrottlingException": 400,
    "ExpiredIteratorException": 400,
    "InternalFailure": 500,
    "InternalServerError": 500,
    "ServiceUnavailable": 503,
}


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def error_response(url: str, code: str) -> AWSResponse:
    body = json.dumps({"__type": code, "message": f"injected {code}"}).encode()
    headers = {"x-amzn-RequestId": "injected", "Content-Type": "application/x-amz-json-1.1"}
    return AWSResponse(url, _STATUS.get(code, 400), headers, _Raw(body))


class FaultPlan:
    """Answers the n-th call of an operation with the error ``choose(n)`` names (or lets it through)."""

    def __init__(self, client: Any, operation: str, choose: Callable[[int], str | None]) -> None:
        self._choose = choose
        self._lock = threading.Lock()
        self.calls = 0
        self.injected: Counter[str] = Counter()
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"before-send.{service}.{operation}", self._before_send)

    def _before_send(self, request: Any, **_: Any) -> AWSResponse | None:
        with self._lock:
            self.calls += 1
            code = self._choose(self.calls)
            if code is None:
                return None
            self.injected[code] += 1
        return error_response(request.url, code)
