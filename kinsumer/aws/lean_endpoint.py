"""Kinesis calls sent without botocore's request pipeline: where they may go, and their signature.

kinsumer sends two calls itself: GetRecords (:mod:`.lean_get_records`, botocore's pipeline
costs more CPU than the call) and SubscribeToShard (:mod:`.subscription_http`, read on an
event loop instead of a thread per subscription). Both go only where they do exactly what
botocore would: a Kinesis client signing with SigV4 and its own credentials, over http or https
without a proxy or a client certificate, and with no event handler on the operation but
botocore's own and kinsumer's. Anything else (a user's hook, a Stubber, a proxy, anonymous
access) keeps going through botocore, unchanged. Error answers are raised as botocore raises
them (``ClientError`` with the service's code), so retries and error handling see no difference.

The request goes to the client's endpoint (``meta.endpoint_url``), signed with Signature
Version 4 with the credentials the client's signer holds (refreshed as botocore refreshes them).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import ssl
import threading
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import botocore
import botocore.exceptions
import botocore.httpsession

__all__ = ["LeanEndpoint", "client_error", "per_client"]

log = logging.getLogger("kinsumer.reading")
T = TypeVar("T")

_TARGET = "Kinesis_20131202."
_CONTENT_TYPE = "application/x-amz-json-1.1"
_SIGNED_HEADERS = "content-type;host;x-amz-date;x-amz-target"
_SIGNED_HEADERS_TOKEN = "content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
_EVENTS = (
    "provide-client-params", "before-parameter-build", "before-call", "request-created", "before-sign",
    "before-send", "needs-retry", "after-call", "before-parse", "after-call-error",
)  # fmt: skip


class LeanEndpoint:
    """Where one botocore Kinesis client's calls go, and how they are signed (see the module's description).

    Thread-safe.
    """

    def __init__(self, kinesis: Any, endpoint: urllib.parse.SplitResult) -> None:
        self._signer = kinesis._request_signer
        self._region = self.region = str(kinesis.meta.region_name)
        self._service = str(kinesis.meta.service_model.signing_name)
        self.url = endpoint.geturl()
        self.host = endpoint.netloc  # the Host header
        self.hostname = endpoint.hostname or ""
        self.port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
        config = kinesis.meta.config
        self.connect_timeout: float = config.connect_timeout
        self.read_timeout: float = config.read_timeout
        self.context: ssl.SSLContext | None = None  # https
        if endpoint.scheme == "https":
            verify = kinesis._endpoint.http_session._verify
            self.context = ssl.create_default_context(cafile=botocore.httpsession.get_cert_path(verify) or None)
            if verify is False:
                self.context.check_hostname = False
                self.context.verify_mode = ssl.CERT_NONE
        self._user_agent = f"kinsumer botocore/{botocore.__version__}"
        self._keys: tuple[str, str, bytes] | None = None  # (date, secret key, signing key)

    @classmethod
    def of(cls, kinesis: Any, operation: str) -> LeanEndpoint | None:
        """The endpoint of ``kinesis``, or None if botocore must make its ``operation`` calls."""
        meta = getattr(kinesis, "meta", None)
        if meta is None or meta.service_model.service_name != "kinesis" or meta.region_name is None:
            return None
        config = meta.config
        if config.signature_version not in (None, "v4") or config.proxies or config.client_cert:
            return None
        if getattr(kinesis, "_request_signer", None) is None or kinesis._request_signer._credentials is None:
            return None
        endpoint = urllib.parse.urlsplit(meta.endpoint_url)
        if endpoint.scheme not in ("http", "https") or endpoint.path not in ("", "/") or endpoint.query:
            return None
        if urllib.request.getproxies() and not urllib.request.proxy_bypass(endpoint.hostname or ""):
            return None  # HTTP(S)_PROXY applies to this endpoint: botocore knows how to go through it
        if not _default_handlers_only(kinesis, operation):
            return None
        return cls(kinesis, endpoint)

    def request(self, operation: str, body: bytes) -> bytes:
        """The whole signed HTTP/1.1 request of ``operation`` with the JSON ``body``."""
        head = "".join(f"{name}: {value}\r\n" for name, value in self.signed_headers(operation, body).items())
        return f"POST / HTTP/1.1\r\nHost: {self.host}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body

    def signed_headers(self, operation: str, body: bytes) -> dict[str, str]:
        """The headers of ``operation`` with ``body`` (but Host and Content-Length), signed."""
        credentials = self._signer._credentials.get_frozen_credentials()  # refreshed by botocore when due
        amz_date = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        date = amz_date[:8]
        target = _TARGET + operation
        token = credentials.token
        signed = _SIGNED_HEADERS_TOKEN if token else _SIGNED_HEADERS
        canonical_headers = f"content-type:{_CONTENT_TYPE}\nhost:{self.host}\nx-amz-date:{amz_date}\n"
        if token:
            canonical_headers += f"x-amz-security-token:{token}\n"
        canonical_headers += f"x-amz-target:{target}\n"
        payload_hash = hashlib.sha256(body).hexdigest()
        canonical = f"POST\n/\n\n{canonical_headers}\n{signed}\n{payload_hash}"
        scope = f"{date}/{self._region}/{self._service}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(date, credentials.secret_key), to_sign.encode(), hashlib.sha256)
        headers = {
            "Content-Type": _CONTENT_TYPE,
            "X-Amz-Target": target,
            "X-Amz-Date": amz_date,
            "User-Agent": self._user_agent,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature.hexdigest()}",
        }
        if token:
            headers["X-Amz-Security-Token"] = token
        return headers

    def _signing_key(self, date: str, secret: str) -> bytes:
        keys = self._keys
        if keys is not None and keys[0] == date and keys[1] == secret:
            return keys[2]
        key = _hmac(f"AWS4{secret}".encode(), date)
        for part in (self._region, self._service, "aws4_request"):
            key = _hmac(key, part)
        self._keys = (date, secret, key)
        return key


def per_client(
    cache: weakref.WeakKeyDictionary[Any, T | None], lock: threading.Lock, kinesis: Any, make: Callable[[Any], T | None]
) -> T | None:
    """``make(kinesis)`` once per client, kept in ``cache``: a lean caller, or None where botocore makes the calls."""
    try:
        return cache[kinesis]
    except (KeyError, TypeError):
        pass
    with lock:
        if kinesis not in cache:
            made = None
            try:
                made = make(kinesis)
            except Exception:
                log.debug("calls go through botocore", exc_info=True)
            cache[kinesis] = made
        return cache[kinesis]


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def client_error(status: int, data: bytes, operation: str) -> botocore.exceptions.ClientError:
    """What botocore raises for this error answer of the JSON protocol to ``operation``."""
    code, message = "", ""
    try:
        body = json.loads(data) if data else {}
        code = str(body.get("__type") or body.get("code") or "").rsplit("#", 1)[-1]
        message = str(body.get("message") or body.get("Message") or "")
    except (ValueError, AttributeError):
        pass
    if not code:
        code = str(status) if status != 200 else "MalformedResponse"
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, operation)  # type: ignore[arg-type]


def _handler_names(kinesis: Any, operation: str) -> frozenset[str]:
    """Who handles the events of an ``operation`` call on ``kinesis``: (module, qualified name) of each handler.

    moto's stubber, which importing moto registers on every client, is left out while no mock is
    in effect (it then lets every request through).
    """
    emitter = kinesis.meta.events
    emitter = getattr(emitter, "_emitter", emitter)  # botocore wraps it in an EventAliaser
    names = set()
    for event in _EVENTS:
        for handler in emitter._handlers.prefix_search(f"{event}.kinesis.{operation}"):
            function = getattr(handler, "__func__", handler)
            module = getattr(function, "__module__", None) or type(function).__module__
            if module == "moto.core.botocore_stubber" and getattr(function, "enabled", True) is False:
                continue
            names.add(f"{module}.{getattr(function, '__qualname__', type(function).__qualname__)}")
    return frozenset(names)


def _default_handlers_only(kinesis: Any, operation: str) -> bool:
    """No handler on ``operation`` but botocore's own and kinsumer's."""
    names = _handler_names(kinesis, operation)
    extra = sorted(name for name in names if not name.startswith(("botocore.", "kinsumer.")))
    if extra:
        log.debug("%s goes through botocore: handlers %s", operation, extra)
    return not extra
