"""Every DynamoDB call a client makes on one application's tables, counted for the stats receiver.

kinsumer reaches DynamoDB through botocore only, so botocore's own events see each call once, retries
included: ``before-parameter-build`` (its parameters: the table) starts the clock, and ``after-call`` (an
answer, an error status too) or ``after-call-error`` (no answer: a connection fault) stops it. A call on
another table (a client shared with other code, or another application's Kinsumer) is not counted here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..stats import StatReceiver

if TYPE_CHECKING:
    from .tables import Tables

__all__ = ["CallWatch"]

_STARTED = "kinsumer_call_started"  # one call's (clock, operation, table) in botocore's request context


class CallWatch:
    """Reports each DynamoDB call on ``tables`` to ``stats.dynamodb_call`` while attached to a client."""

    def __init__(self, tables: Tables, stats: StatReceiver) -> None:
        self._roles = {tables.clients: "clients", tables.checkpoints: "checkpoints", tables.metadata: "metadata"}
        self._stats = stats
        self._events: Any = None
        self._id = f"kinsumer-calls-{id(self)}"

    def attach(self, client: Any) -> None:
        """Watch ``client`` (a botocore DynamoDB client; one without botocore's events is not watched)."""
        events = getattr(getattr(client, "meta", None), "events", None)
        if events is None or self._events is not None:
            return
        self._events = events
        events.register("before-parameter-build.dynamodb", self._started, unique_id=f"{self._id}-start")
        events.register("after-call.dynamodb", self._answered, unique_id=f"{self._id}-answer")
        events.register("after-call-error.dynamodb", self._failed, unique_id=f"{self._id}-error")

    def detach(self) -> None:
        """Stop watching. Idempotent."""
        events, self._events = self._events, None
        if events is None:
            return
        events.unregister("before-parameter-build.dynamodb", unique_id=f"{self._id}-start")
        events.unregister("after-call.dynamodb", unique_id=f"{self._id}-answer")
        events.unregister("after-call-error.dynamodb", unique_id=f"{self._id}-error")

    def _started(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        table = params.get("TableName")
        if table is None and len(params.get("RequestItems") or ()) == 1:  # BatchGetItem: its table is a key
            table = next(iter(params["RequestItems"]))
        role = self._roles.get(table)  # type: ignore[arg-type]
        if role is not None:
            context[_STARTED] = (time.perf_counter(), model.name, role)

    def _answered(self, http_response: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        error = None
        if http_response.status_code >= 300:
            error = parsed.get("Error", {}).get("Code") or f"HTTP {http_response.status_code}"
        self._report(context, error)

    def _failed(self, exception: BaseException, context: dict[str, Any], **_: Any) -> None:
        self._report(context, type(exception).__name__)

    def _report(self, context: dict[str, Any], error: str | None) -> None:
        started = context.pop(_STARTED, None)
        if started is not None:
            clock, operation, role = started
            self._stats.dynamodb_call(operation, role, time.perf_counter() - clock, error)
