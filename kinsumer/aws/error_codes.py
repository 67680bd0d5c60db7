"""AWS errors, recognised in one place: transient or not, and what each means to kinsumer.

Every check of an AWS error code in kinsumer goes through this module: the retry policy
(:func:`is_transient`), the expected outcomes of conditional writes and look-ups
(:func:`is_condition_failure`, :func:`is_not_found`, ...), the faults of an endpoint never
reached (:func:`unreached`), and the translation of anything else into the
:class:`~kinsumer.KinsumerError` a caller sees (:func:`to_kinsumer_error`).
"""

from __future__ import annotations

import socket
import ssl
import urllib.parse

import attrs
import botocore.exceptions

from ..errors import AWSError, EndpointUnreachable, KinsumerError

__all__ = [
    "Unreached",
    "error_code",
    "error_message",
    "is_condition_failure",
    "is_expired_iterator",
    "is_in_use",
    "is_missing_bucket",
    "is_missing_object",
    "is_missing_queue",
    "is_not_found",
    "is_transient",
    "to_kinsumer_error",
    "unreached",
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
    """True for faults that go away by themselves: throttling, 5xx, connection problems.

    Connection problems include the endpoints never reached (:func:`unreached`), an untrusted
    certificate too, as botocore's own retries have them: a running consumer reads through a
    server's blip. ``run()`` gives up on them at once (see :mod:`.first_contact`)."""
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


#: SQS's codes for a queue that does not exist (the query protocol's, and the JSON protocol's).
_NO_QUEUE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})


def is_missing_queue(exc: BaseException) -> bool:
    """The SQS queue named in the call does not exist."""
    return isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) in _NO_QUEUE


#: S3's codes for a bucket that does not exist (HeadBucket answers a bare 404: no body to carry a code).
_NO_BUCKET = frozenset({"NoSuchBucket", "404", "NotFound"})


def is_missing_bucket(exc: BaseException) -> bool:
    """The S3 bucket named in the call does not exist."""
    return isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) in _NO_BUCKET


def is_missing_object(exc: BaseException) -> bool:
    """The S3 object (or its bucket) named in the call does not exist."""
    return isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) in {"NoSuchKey", *_NO_BUCKET}


def is_in_use(exc: BaseException) -> bool:
    """The resource is being created, deleted or used (CreateTable, DeleteTable...)."""
    return _has_code(exc, "ResourceInUseException")


def is_expired_iterator(exc: BaseException) -> bool:
    """A shard iterator older than five minutes: take a new one."""
    return _has_code(exc, "ExpiredIteratorException")


@attrs.frozen
class Unreached:
    """Why an endpoint was never reached, and what to do about it."""

    endpoint: str  # its URL
    reason: str  # "connection refused", "unknown host ...", "certificate verify failed: ..."
    advice: str
    lasting: bool  # trying again gets the same answer (an untrusted certificate, a name the DNS does not know)


_REFUSED = (
    "nothing accepts connections there: check the endpoint URL (endpoint_url= or AWS_ENDPOINT_URL) and that "
    "the server runs"
)
_UNKNOWN_HOST = "check the host name of the endpoint URL (endpoint_url= or AWS_ENDPOINT_URL), the region, and DNS"
_UNTRUSTED = (
    "the server's TLS certificate is not trusted: give the CA bundle that signed it (AWS_CA_BUNDLE, or verify= "
    "on the boto3 client), or check the endpoint URL"
)


def unreached(exc: BaseException) -> Unreached | None:
    """What kept a connection to the endpoint from being made at all, if that is what ``exc`` is (a botocore
    connection error caused by a refused connection, an unknown host, or a certificate that failed
    verification); None for anything else (an answer, a connection that broke, a timeout...)."""
    if not isinstance(exc, botocore.exceptions.ConnectionError):
        return None
    endpoint = str(exc.kwargs.get("endpoint_url") or "the endpoint")
    for cause in _causes(exc):
        if isinstance(cause, ConnectionRefusedError):
            return Unreached(endpoint, "connection refused", _REFUSED, lasting=False)
        if isinstance(cause, socket.gaierror):  # the DNS said the name has no address, or did not answer
            host = urllib.parse.urlsplit(endpoint).hostname or endpoint
            if cause.errno == socket.EAI_AGAIN:
                return Unreached(endpoint, f"host {host!r} not resolved ({cause.strerror})", _UNKNOWN_HOST, False)
            return Unreached(endpoint, f"unknown host {host!r} ({cause.strerror})", _UNKNOWN_HOST, lasting=True)
        if isinstance(cause, ssl.SSLCertVerificationError):
            detail = getattr(cause, "verify_message", None) or str(cause)
            return Unreached(endpoint, f"certificate verify failed: {detail}", _UNTRUSTED, lasting=True)
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (botocore's ``error``, urllib3's argument, the chained exceptions), nearest first."""
    found: list[BaseException] = []
    pending = [exc]
    while pending and len(found) < 20:
        current = pending.pop(0)
        if any(current is seen for seen in found):
            continue
        found.append(current)
        kwargs = getattr(current, "kwargs", None)
        wrapped = [kwargs.get("error")] if isinstance(kwargs, dict) else []
        wrapped += [*current.args, current.__cause__, current.__context__]
        pending += [item for item in wrapped if isinstance(item, BaseException)]
    return found


def to_kinsumer_error(exc: BaseException, where: str) -> KinsumerError:
    """``exc`` as the KinsumerError a caller sees, chained to it (a KinsumerError stays itself)."""
    if isinstance(exc, KinsumerError):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        error: KinsumerError = AWSError(exc.operation_name, error_code(exc), error_message(exc))
    elif isinstance(exc, botocore.exceptions.NoCredentialsError):
        error = AWSError(where, "NoCredentials", "no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID)")
    elif (fault := unreached(exc)) is not None:
        error = EndpointUnreachable(where, type(exc).__name__, fault.endpoint, fault.reason, fault.advice)
    elif isinstance(exc, botocore.exceptions.EndpointConnectionError):
        url = exc.kwargs.get("endpoint_url")
        error = AWSError(where, "EndpointConnectionError", f"cannot reach {url}: check the endpoint and the network")
    elif isinstance(exc, botocore.exceptions.BotoCoreError):
        error = AWSError(where, type(exc).__name__, str(exc))
    else:
        error = KinsumerError(f"unexpected error in {where}: {exc!r}")
    error.__cause__ = exc
    return error
