"""Errors raised as botocore raises them: the same exception classes, response shape and operation name."""

from __future__ import annotations

import functools
from typing import Any

import botocore.exceptions
import botocore.session
from botocore.errorfactory import ClientExceptionsFactory
from botocore.model import ServiceModel

__all__ = ["SimError", "client_error", "exceptions", "service_model", "validation"]


class SimError(Exception):
    """An AWS error found while handling a request; the client turns it into botocore's ClientError."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = 400  # the HTTP status it comes with (a server's fault: 500 or 503)
        self.extra = extra  # modeled fields of the error (Item, ThrottlingReasons...)


@functools.cache
def service_model(service: str = "dynamodb") -> ServiceModel:
    """botocore's own model of ``service`` (the installed botocore's), loaded once."""
    return botocore.session.get_session().get_service_model(service)


@functools.cache
def exceptions(service: str = "dynamodb") -> Any:
    """botocore's exception classes for ``service`` (what ``client.exceptions`` holds)."""
    return ClientExceptionsFactory().create_client_exceptions(service_model(service))


def client_error(
    error: SimError, operation: str, metadata: dict[str, Any], service: str = "dynamodb"
) -> botocore.exceptions.ClientError:
    """``error`` as botocore raises it: the modeled exception class (ConditionalCheckFailedException...) when
    the service's model has one, else a plain ClientError; modeled errors carry ``message`` and their fields."""
    response: dict[str, Any] = {
        "Error": {"Message": error.message, "Code": error.code},
        "ResponseMetadata": {**metadata, "HTTPStatusCode": error.status},
    }
    cls = exceptions(service).from_code(error.code)
    if cls is not botocore.exceptions.ClientError:
        response["message"] = error.message
        response.update(error.extra)
    exc: botocore.exceptions.ClientError = cls(response, operation)
    return exc


def validation(message: str) -> SimError:
    return SimError("ValidationException", message)
