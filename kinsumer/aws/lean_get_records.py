"""GetRecords without botocore's request pipeline: the call a polling reader makes most.

botocore spends about 0.5 ms of CPU on each call before and after the HTTP exchange (parameter
validation, event hooks, endpoint rules, header objects, signing through generic request
objects); a client polling hundreds of idle shards spends most of its time there. This module
sends the same request itself: a JSON body, Signature Version 4 (with the credentials the
client's signer holds, refreshed as botocore refreshes them), a keep-alive connection per
thread (:mod:`.http1`), and the answer parsed by :mod:`.records_parser` in one pass.

It is used only where it does exactly what botocore would: a Kinesis client signing with SigV4
and its own credentials, over http or https without a proxy or a client certificate, and with
no event handler on GetRecords but botocore's own and kinsumer's. Anything else (a user's
hook, a Stubber, a proxy, anonymous access) keeps going through botocore, unchanged. Errors are
raised as botocore raises them (``ClientError`` with the service's code, connection errors as
botocore's), so retries and error handling see no difference.
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
from typing import Any

import botocore
import botocore.exceptions
import botocore.httpsession

from . import http1, records_parser

__all__ = ["LeanGetRecords", "get_records", "lean_for"]

log = logging.getLogger("kinsumer.reading")

_TARGET = "Kinesis_20131202.GetRecords"
_CONTENT_TYPE = "application/x-amz-json-1.1"
_SIGNED_HEADERS = "content-type;host;x-amz-date;x-amz-target"
_SIGNED_HEADERS_TOKEN = "content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
_EVENTS = (
    "provide-client-params", "before-parameter-build", "before-call", "request-created", "before-sign",
    "before-send", "needs-retry", "after-call", "before-parse", "after-call-error",
)  # fmt: skip
_cache: weakref.WeakKeyDictionary[Any, LeanGetRecords | None] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def get_records(kinesis: Any, shard_iterator: str, limit: int) -> dict[str, Any]:
    """kinsumer's one GetRecords: sent here where it may be, else by botocore (and :mod:`.records_parser`)."""
    lean = lean_for(kinesis)
    if lean is not None:
        return lean.get_records(shard_iterator, limit)
    return records_parser.get_records(kinesis, ShardIterator=shard_iterator, Limit=limit)


def lean_for(kinesis: Any) -> LeanGetRecords | None:
    """The lean caller of ``kinesis`` (made once per client), or None where botocore must make the call."""
    try:
        return _cache[kinesis]
    except (KeyError, TypeError):
        pass
    with _cache_lock:
        if kinesis not in _cache:
            lean = None
            try:
                lean = LeanGetRecords.of(kinesis)
            except Exception:
                log.debug("GetRecords goes through botocore", exc_info=True)
            _cache[kinesis] = lean
        return _cache[kinesis]


class LeanGetRecords:
    """Sends GetRecords for one botocore Kinesis client (see the module's description). Thread-safe."""

    def __init__(self, kinesis: Any, endpoint: urllib.parse.SplitResult) -> None:
        self._signer = kinesis._request_signer
        self._region = str(kinesis.meta.region_name)
        self._service = str(kinesis.meta.service_model.signing_name)
        self._endpoint = endpoint
        self._url = endpoint.geturl()
        self._host = endpoint.netloc
        self._default_port = 443 if endpoint.scheme == "https" else 80
        config = kinesis.meta.config
        self._timeout = (config.connect_timeout, config.read_timeout)
        self._context: ssl.SSLContext | None = None
        if endpoint.scheme == "https":
            verify = kinesis._endpoint.http_session._verify
            self._context = ssl.create_default_context(cafile=botocore.httpsession.get_cert_path(verify) or None)
            if verify is False:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        self._user_agent = f"kinsumer botocore/{botocore.__version__}"
        self._local = threading.local()  # each thread's connection
        self._keys: tuple[str, str, bytes] | None = None  # (date, secret key, signing key)

    @classmethod
    def of(cls, kinesis: Any) -> LeanGetRecords | None:
        """A lean caller for ``kinesis``, or None if botocore must make its calls (see the module's description)."""
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
        if not _default_handlers_only(kinesis):
            return None
        return cls(kinesis, endpoint)

    def get_records(self, shard_iterator: str, limit: int) -> dict[str, Any]:
        """One GetRecords attempt: the answer in botocore's shape, or botocore's exception."""
        body = json.dumps({"ShardIterator": shard_iterator, "Limit": limit}).encode()
        headers = self._signed_headers(body)
        status, data = self._exchange(body, headers)
        if status == 200:
            parsed, ok = records_parser.parse_body(data)
            if ok:
                parsed["ResponseMetadata"] = {"HTTPStatusCode": 200}
                return parsed
        raise _client_error(status, data)

    # ----------------------------------------------------------------- signing

    def _signed_headers(self, body: bytes) -> dict[str, str]:
        credentials = self._signer._credentials.get_frozen_credentials()  # refreshed by botocore when due
        now = dt.datetime.now(dt.UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        date = amz_date[:8]
        token = credentials.token
        signed = _SIGNED_HEADERS_TOKEN if token else _SIGNED_HEADERS
        canonical_headers = f"content-type:{_CONTENT_TYPE}\nhost:{self._host}\nx-amz-date:{amz_date}\n"
        if token:
            canonical_headers += f"x-amz-security-token:{token}\n"
        canonical_headers += f"x-amz-target:{_TARGET}\n"
        payload_hash = hashlib.sha256(body).hexdigest()
        canonical = f"POST\n/\n\n{canonical_headers}\n{signed}\n{payload_hash}"
        scope = f"{date}/{self._region}/{self._service}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(date, credentials.secret_key), to_sign.encode(), hashlib.sha256)
        headers = {
            "Content-Type": _CONTENT_TYPE,
            "X-Amz-Target": _TARGET,
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

    # ----------------------------------------------------------------- HTTP

    def _connection(self) -> http1.Connection:
        connection: http1.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            host, port = self._endpoint.hostname or "", self._endpoint.port or self._default_port
            connection = http1.Connection(
                host, port, context=self._context, connect_timeout=self._timeout[0], read_timeout=self._timeout[1]
            )
            self._local.connection = connection
        return connection

    def _exchange(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """POST ``body``; the status and the answer's body. A kept-alive connection the server closed
        meanwhile is opened again once at once; other connection faults raise botocore's errors."""
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        request = f"POST / HTTP/1.1\r\nHost: {self._host}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
        request += body
        for attempt in (1, 2):
            try:
                connection = self._connection()
                reused = connection.used
                status, data, keep = connection.exchange(request)
                if not keep:
                    self._drop()
                return status, data
            except (http1.Closed, BrokenPipeError, ConnectionResetError) as exc:
                self._drop()
                if attempt == 1 and reused:
                    continue  # the server closed an idle connection: a new one, once
                raise botocore.exceptions.ConnectionClosedError(endpoint_url=self._url) from exc
            except TimeoutError as exc:
                self._drop()
                raise botocore.exceptions.ReadTimeoutError(endpoint_url=self._url) from exc
            except (OSError, ValueError) as exc:  # refused, unreachable, TLS, an answer that is not HTTP/1
                self._drop()
                raise botocore.exceptions.EndpointConnectionError(endpoint_url=self._url) from exc
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def _client_error(status: int, data: bytes) -> botocore.exceptions.ClientError:
    """What botocore raises for this error answer of the JSON protocol."""
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
    return botocore.exceptions.ClientError(response, "GetRecords")  # type: ignore[arg-type]


def _handler_names(kinesis: Any) -> frozenset[str]:
    """Who handles the events of a GetRecords call on ``kinesis``: (module, qualified name) of each handler.

    moto's stubber, which importing moto registers on every client, is left out while no mock is
    in effect (it then lets every request through).
    """
    emitter = kinesis.meta.events
    emitter = getattr(emitter, "_emitter", emitter)  # botocore wraps it in an EventAliaser
    names = set()
    for event in _EVENTS:
        for handler in emitter._handlers.prefix_search(f"{event}.kinesis.GetRecords"):
            function = getattr(handler, "__func__", handler)
            module = getattr(function, "__module__", None) or type(function).__module__
            if module == "moto.core.botocore_stubber" and getattr(function, "enabled", True) is False:
                continue
            names.add(f"{module}.{getattr(function, '__qualname__', type(function).__qualname__)}")
    return frozenset(names)


def _default_handlers_only(kinesis: Any) -> bool:
    """No handler on GetRecords but botocore's own and kinsumer's."""
    extra = sorted(name for name in _handler_names(kinesis) if not name.startswith(("botocore.", "kinsumer.")))
    if extra:
        log.debug("GetRecords goes through botocore: handlers %s", extra)
    return not extra
