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
import types
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

import botocore.config
from botocore.hooks import HierarchicalEmitter
from botocore.validate import validate_parameters

from ._errors import SimError, client_error, exceptions, service_model

__all__ = ["ServiceClient"]

Handler = Callable[[dict[str, Any]], dict[str, Any]]


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

    def connection(self) -> Self:
        """Another client of the same service (the same tables, the same streams), as another process holds:
        events of its own (``meta.events``), and :meth:`cut` cuts it off alone."""
        twin = copy.copy(self)
        twin.meta = types.SimpleNamespace(**{**vars(self.meta), "events": HierarchicalEmitter()})
        twin._cut = False
        return twin

    def cut(self) -> None:
        """From now on no call of this client reaches the service, as for a process that died: each is refused
        (``AccessDeniedException``, an error no retry fixes, so that what is left of the client ends at once).
        The service's state and its other clients go on."""
        self._cut = True

    def _failed(self, operation: str, params: dict[str, Any], error: SimError) -> None:
        """Called (under the lock) for each request answered with ``error``."""

    def _call(self, operation: str, params: dict[str, Any], handler: Handler) -> dict[str, Any]:
        """One request of ``operation``, as botocore makes it (see the module's description)."""
        service = self.SERVICE
        if self._cut:
            error = SimError("AccessDeniedException", "this client was cut off (kinsumer.testing: its process crashed)")
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
            try:
                response = handler(params)
            except SimError as error:
                self._failed(operation, params, error)
                exc = client_error(error, operation, metadata, service)
                events.emit(f"after-call.{service}.{operation}", http_response=_HTTP(400), parsed=exc.response,
                            model=model, context=context)  # fmt: skip
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
