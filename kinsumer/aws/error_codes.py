"""AWS errors, recognised in one place: transient or not, and what each means to kinsumer.

Every check of an AWS error code in kinsumer goes through this module: the retry policy
(:func:`is_transient`), the expected outcomes of conditional writes and look-ups
(:func:`is_condition_failure`, :func:`is_not_found`, ...), and the translation of anything
else into the :class:`~kinsumer.KinsumerError` a caller sees (:func:`to_kinsumer_error`).
"""

from __future__ import annotations

import botocore.exceptions

from ..errors import AWSError, KinsumerError

__all__ = [
    "error_code",
    "error_message",
    "is_condition_failure",
    "is_expired_iterator",
    "is_in_use",
    "is_not_found",
    "is_transient",
    "to_kinsumer_error",
]

_THROTTLING = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "LimitExceededException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "KMSThrottlingException",
        "TransactionInProgressException",
    }
)
_SERVER = frozenset(
    {
        "InternalFailure",
        "InternalError",
        "InternalServerError",
        "InternalServerException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)
_CONNECTION = (
    botocore.exceptions.ConnectionError,
    botocore.exceptions.HTTPClientError,
    ConnectionError,
    TimeoutError,
)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ClientError, else the exception's class name."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", "")) or type(exc).__name__
    return type(exc).__name__


def error_message(exc: BaseException) -> str:
    """The AWS error message of a ClientError, else the exception's text."""
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Message", ""))
    return str(exc)


def is_transient(exc: BaseException) -> bool:
    """True for faults that go away by themselves: throttling, 5xx, connection problems."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = error_code(exc)
        if code in _THROTTLING or code in _SERVER:
            return True
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return isinstance(status, int) and status >= 500
    return isinstance(exc, _CONNECTION)


def _has_code(exc: BaseException, code: str) -> bool:
    return isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) == code


def is_condition_failure(exc: BaseException) -> bool:
    """A conditional DynamoDB write whose condition did not hold (an expected outcome)."""
    return _has_code(exc, "ConditionalCheckFailedException")


def is_not_found(exc: BaseException) -> bool:
    """The stream, shard or table named in the call does not exist."""
    return _has_code(exc, "ResourceNotFoundException")


def is_in_use(exc: BaseException) -> bool:
    """The resource is being created, deleted or used (CreateTable, DeleteTable...)."""
    return _has_code(exc, "ResourceInUseException")


def is_expired_iterator(exc: BaseException) -> bool:
    """A shard iterator older than five minutes: take a new one."""
    return _has_code(exc, "ExpiredIteratorException")


def to_kinsumer_error(exc: BaseException, where: str) -> KinsumerError:
    """``exc`` as the KinsumerError a caller sees, chained to it (a KinsumerError stays itself)."""
    if isinstance(exc, KinsumerError):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        error: KinsumerError = AWSError(exc.operation_name, error_code(exc), error_message(exc))
    elif isinstance(exc, botocore.exceptions.NoCredentialsError):
        error = AWSError(where, "NoCredentials", "no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID)")
    elif isinstance(exc, botocore.exceptions.EndpointConnectionError):
        url = exc.kwargs.get("endpoint_url")
        error = AWSError(where, "EndpointConnectionError", f"cannot reach {url}: check the endpoint and the network")
    elif isinstance(exc, botocore.exceptions.BotoCoreError):
        error = AWSError(where, type(exc).__name__, str(exc))
    else:
        error = KinsumerError(f"unexpected error in {where}: {exc!r}")
    error.__cause__ = exc
    return error
