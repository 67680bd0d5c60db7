"""What the in-memory clients share with botocore's: the events, the parameter checks, one request at a time.

A request goes as botocore sends it: ``provide-client-params`` and ``before-parameter-build`` are emitted on
the client's own emitter (``meta.events``, botocore's), the parameters are validated against botocore's model
of the service, the request is handled whole under the client's lock (as the service handles each request
atomically), and ``after-call`` is emitted with the answer; an error is raised as botocore raises it (the
modeled exception class, the error response's shape). Hooks that count calls (``kinsumer.aws.call_watch``)
see the calls as on a real client.
"""

from __future__ import annotations

import copy
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Self

import attrs
import botocore.config
from botocore.hooks import HierarchicalEmitter
from botocore.validate import validate_parameters

from ._errors import SimError, client_error, exceptions, service_model

__all__ = ["CUT_OFF", "ServiceClient"]

#: What a call of a client cut off (its process crashed: :meth:`ServiceClient.cut`) is refused with.
CUT_OFF = "this client was cut off (kinsumer.testing: its process crashed)"

Handler = Callable[[dict[str, Any]], dict[str, Any]]
#: The codes that come with a server's status (5xx) rather than 400.
_SERVER_ERRORS = {"InternalFailure": 500, "InternalServerError": 500, "ServiceUnavailable": 503,
                  "ServiceUnavailableException": 503}  # fmt: skip


@attrs.frozen
class _Fault:
    """Calls of ``operations`` (None: every one) are refused with ``code`` until ``until`` (monotonic)."""

    code: str
    until: float
    operations: frozenset[str] | None

    def refuse(self, params: dict[str, Any]) -> dict[str, Any]:
        error = SimError(self.code, f"{self.code} (kinsumer.testing: a fault injected with fail())")
        error.status = _SERVER_ERRORS.get(self.code, 400)
        raise error


class ServiceClient:
    """The base of an in-memory client of ``SERVICE``: ``SUPPORTED`` names each operation's modeled parameters."""

    SERVICE: ClassVar[str]
    SUPPORTED: ClassVar[Mapping[str, frozenset[str] | set[str]]]

    def __init__(self, *, region: str, account: str, validate: bool) -> None:
        self._region, self._account, self._validate = region, account, validate
        self._lock = threading.RLock()
        self._requests = 0
        self.meta = types.SimpleNamespace(
            events=HierarchicalEmitter(), region_name=region, service_model=service_model(self.SERVICE),
            partition="aws", endpoint_url=f"https://{self.SERVICE}.{region}.amazonaws.com",
            config=botocore.config.Config(region_name=region),
        )  # fmt: skip
        self.exceptions = exceptions(self.SERVICE)
        self._cut = False
        self._running = threading.Event()
        self._running.set()
        self._faults: list[_Fault] = []

    def connection(self) -> Self:
        """Another client of the same service (the same tables, the same streams), as another process holds:
        events of its own (``meta.events``), and :meth:`cut`, :meth:`pause` and :meth:`fail` act on it alone."""
        twin = copy.copy(self)
        twin.meta = types.SimpleNamespace(**{**vars(self.meta), "events": HierarchicalEmitter()})
        twin._cut = False
        twin._running = threading.Event()
        twin._running.set()
        twin._faults = []
        return twin

    def cut(self) -> None:
        """From now on no call of this client reaches the service, as for a process that died: each is refused
        (``AccessDeniedException``, an error no retry fixes, so that what is left of the client ends at once).
        The service's state and its other clients go on. Calls held by :meth:`pause` go on, and are refused."""
        self._cut = True
        self._running.set()

    def pause(self) -> None:
        """From now on each call of this client waits, until :meth:`resume`, before it reaches the service: a
        process stopped (SIGSTOP) or cut off by the network for a while. The service and its other clients go on."""
        self._running.clear()

    def resume(self) -> None:
        """The calls :meth:`pause` held go on, and the calls that follow."""
        self._running.set()

    def fail(
        self, seconds: float, error: str = "ProvisionedThroughputExceededException",
        operations: Iterable[str] | None = None,
    ) -> None:  # fmt: skip
        """For the next ``seconds`` (real time), the calls of this client (of ``operations`` only, as
        ``"GetRecords"``, if given) are refused with ``error``, as the service does when it throttles
        (``ProvisionedThroughputExceededException``, DynamoDB's ``ThrottlingException``) or fails (a 5xx:
        ``InternalFailure``, ``ServiceUnavailable``); any other code is a 400 error."""
        if not seconds > 0:
            raise ValueError(f"seconds: how long calls fail, more than 0, not {seconds!r}")
        names = None if operations is None else frozenset(operations)
        unknown = sorted((names or set()) - set(self.SUPPORTED))
        if unknown:
            raise ValueError(f"operations: {', '.join(unknown)} not among {type(self).__name__}'s: "
                             f"{', '.join(sorted(self.SUPPORTED))}")  # fmt: skip
        with self._lock:
            self._faults.append(_Fault(error, time.monotonic() + seconds, names))

    def _fault(self, operation: str) -> _Fault | None:
        """The fault that refuses a call of ``operation`` now, if any (lock held); ended ones are dropped."""
        now = time.monotonic()
        self._faults = [f for f in self._faults if f.until > now]
        return next((f for f in self._faults if f.operations is None or operation in f.operations), None)

    def _failed(self, operation: str, params: dict[str, Any], error: SimError) -> None:
        """Called (under the lock) for each request answered with ``error``."""

    def _call(self, operation: str, params: dict[str, Any], handler: Handler) -> dict[str, Any]:
        """One request of ``operation``, as botocore makes it (see the module's description)."""
        service = self.SERVICE
        self._running.wait()
        if self._cut:
            error = SimError("AccessDeniedException", CUT_OFF)
            raise client_error(error, operation, {"HTTPHeaders": {}, "RetryAttempts": 0}, service)
        model = self.meta.service_model.operation_model(operation)
        context: dict[str, Any] = {"client_region": self._region, "client_config": None, "has_streaming_input": False}
        events = self.meta.events
        events.emit(f"provide-client-params.{service}.{operation}", params=params, model=model, context=context)
        events.emit(f"before-parameter-build.{service}.{operation}", params=params, model=model, context=context)
        if self._validate:
            validate_parameters(params, model.input_shape)
        unknown = set(params) - set(self.SUPPORTED[operation])
        if unknown:
            raise NotImplementedError(
                f"{type(self).__name__} does not model {operation}'s {', '.join(sorted(unknown))}"
            )
        with self._lock:
            self._requests += 1
            metadata = {"RequestId": f"SIM{self._requests:020d}", "HTTPHeaders": {}, "RetryAttempts": 0}
            fault = self._fault(operation)
            try:
                response = fault.refuse(params) if fault is not None else handler(params)
            except SimError as error:
                self._failed(operation, params, error)
                exc = client_error(error, operation, metadata, service)
                events.emit(f"after-call.{service}.{operation}", http_response=_HTTP(error.status),
                            parsed=exc.response, model=model, context=context)  # fmt: skip
                raise exc from None
        response["ResponseMetadata"] = {**metadata, "HTTPStatusCode": 200, **response.get("ResponseMetadata", {})}
        events.emit(f"after-call.{service}.{operation}", http_response=_HTTP(200), parsed=response, model=model,
                    context=context)  # fmt: skip
        return response


class _HTTP:
    """What ``after-call`` handlers read of the HTTP response."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.headers: dict[str, str] = {}
        self.content = b""
