"""GetRecords without botocore's request pipeline: the call a polling reader makes most.

botocore spends about 0.5 ms of CPU on each call before and after the HTTP exchange (parameter
validation, event hooks, endpoint rules, header objects, signing through generic request
objects); a client polling hundreds of idle shards spends most of its time there. This module
sends the same request itself: a JSON body, Signature Version 4 (with the credentials the
client's signer holds, refreshed as botocore refreshes them), a keep-alive connection per
thread (:mod:`.http1`), and the answer parsed by :mod:`.records_parser` in one pass.

It is used only where it does exactly what botocore would, and signed as
:mod:`.lean_endpoint` describes: a Kinesis client with no event handler on GetRecords but
botocore's own and kinsumer's, and so on. Anything else keeps going through botocore,
unchanged. Errors are raised as botocore raises them (``ClientError`` with the service's code,
connection faults as :mod:`.http1` maps them to botocore's), so retries and error handling see no difference.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

from . import http1, lean_spans, records_parser
from .lean_endpoint import LeanEndpoint, client_error, per_client

__all__ = ["LeanGetRecords", "get_records", "lean_for"]

_cache: weakref.WeakKeyDictionary[Any, LeanGetRecords | None] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def get_records(kinesis: Any, shard_iterator: str, limit: int, stream_arn: str | None = None) -> dict[str, Any]:
    """kinsumer's one GetRecords: sent here where it may be, else by botocore (and :mod:`.records_parser`).
    ``stream_arn``: the stream's ARN when it was given by one (the call then names it, as KCL's do)."""
    lean = lean_for(kinesis)
    if lean is not None:
        return lean.get_records(shard_iterator, limit, stream_arn)
    arn = {"StreamARN": stream_arn} if stream_arn else {}
    return records_parser.get_records(kinesis, ShardIterator=shard_iterator, Limit=limit, **arn)


def lean_for(kinesis: Any) -> LeanGetRecords | None:
    """The lean caller of ``kinesis`` (made once per client), or None where botocore must make the call."""
    return per_client(_cache, _cache_lock, kinesis, LeanGetRecords.of)


class LeanGetRecords:
    """Sends GetRecords for one botocore Kinesis client (see the module's description). Thread-safe."""

    def __init__(self, endpoint: LeanEndpoint) -> None:
        self.endpoint = endpoint
        self._local = threading.local()  # each thread's connection

    @classmethod
    def of(cls, kinesis: Any) -> LeanGetRecords | None:
        """A lean caller for ``kinesis``, or None if botocore must make its calls (see the module's description)."""
        endpoint = LeanEndpoint.of(kinesis, "GetRecords")
        return None if endpoint is None else cls(endpoint)

    def get_records(self, shard_iterator: str, limit: int, stream_arn: str | None = None) -> dict[str, Any]:
        """One GetRecords attempt: the answer in botocore's shape, or botocore's exception; in a span of its
        own while botocore's OpenTelemetry instrumentation is on (:mod:`.lean_spans`)."""
        tracer = lean_spans.tracer()
        if tracer is None:
            return self._get_records(shard_iterator, limit, stream_arn)
        from opentelemetry.trace import SpanKind, StatusCode  # noqa: PLC0415 - imported by then

        attributes = lean_spans.attributes(self.endpoint, "GetRecords")
        with tracer.start_as_current_span(
            "Kinesis.GetRecords", kind=SpanKind.CLIENT, attributes=attributes, set_status_on_exception=False
        ) as span:
            try:
                answer = self._get_records(shard_iterator, limit, stream_arn)
            except Exception as exc:
                status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status is not None:
                    span.set_attribute("http.status_code", status)
                if self._request_id():
                    span.set_attribute("aws.request_id", self._request_id())
                span.set_status(StatusCode.ERROR, str(exc))
                raise
            span.set_attribute("http.status_code", 200)
            if self._request_id():
                span.set_attribute("aws.request_id", self._request_id())
            return answer

    def _request_id(self) -> str:
        """The x-amzn-RequestId of this thread's last answer ("" if none came)."""
        request_id: str = getattr(self._local, "request_id", "")
        return request_id

    def _get_records(self, shard_iterator: str, limit: int, stream_arn: str | None = None) -> dict[str, Any]:
        arn = {"StreamARN": stream_arn} if stream_arn else {}
        body = json.dumps({"ShardIterator": shard_iterator, "Limit": limit, **arn}).encode()
        status, data = self._exchange(self.endpoint.request("GetRecords", body))
        if status == 200:
            parsed, ok = records_parser.parse_body(data)
            if ok:
                parsed["ResponseMetadata"] = {"HTTPStatusCode": 200}
                return parsed
        raise client_error(status, data, "GetRecords")

    # ----------------------------------------------------------------- HTTP

    def _connection(self) -> http1.Connection:
        """This thread's connection, made if it has none (a connection that cannot be made: botocore's error)."""
        connection: http1.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            e = self.endpoint
            try:
                connection = http1.Connection(
                    e.hostname, e.port, context=e.context, connect_timeout=e.connect_timeout,
                    read_timeout=e.read_timeout,
                )  # fmt: skip
            except OSError as exc:  # refused, unknown host, timed out, TLS
                raise http1.connect_error(exc, e.url) from exc
            self._local.connection = connection
        return connection

    def _exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send ``request``; the status and the answer's body. A kept-alive connection the server closed
        meanwhile is opened again once at once; other connection faults raise botocore's errors."""
        for attempt in (1, 2):
            connection = self._connection()
            reused = connection.used
            self._local.request_id = ""
            try:
                status, data, keep = connection.exchange(request)
            except (http1.Closed, BrokenPipeError, ConnectionResetError) as exc:
                self._drop()
                if attempt == 1 and reused:
                    continue  # the server closed an idle connection: a new one, once
                raise http1.answer_error(exc, self.endpoint.url) from exc
            except (OSError, ValueError) as exc:  # timed out, an answer that is not HTTP/1
                self._drop()
                raise http1.answer_error(exc, self.endpoint.url) from exc
            self._local.request_id = connection.request_id
            if not keep:
                self._drop()
            return status, data
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()
