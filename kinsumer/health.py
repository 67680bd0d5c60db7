"""Is this client live, is it ready: :meth:`Kinsumer.health() <kinsumer.Kinsumer.health>`, and the
``/healthz`` (liveness) and ``/readyz`` (readiness) endpoints for Kubernetes' probes.

The verdict is a pure function of a snapshot (:func:`verdict` of :class:`HealthFacts`). Liveness fails
on what a restart fixes: the client stopped, a background error stopped it, its heartbeat is late (its
shards go to the others), a ``process()`` handler call runs on past its ``timeout``. Readiness fails on
those and also while the client is not consuming as it should: ``run()`` not called or not through,
no shard captured yet (or none for longer than a rebalance takes, while there are at least as many
shards as clients), a shard further behind than ``Config.max_healthy_lag``, a client of the Go library
live on the application (kinsumer reads nothing beside it).

:class:`HealthServer` answers the two paths on a port of its own (127.0.0.1 by default), and with a
Prometheus registry serves the registry's metrics on every other path: one port for both.
:func:`health_app` is the same as a WSGI application, to mount anywhere.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import attrs

from .errors import MissingDependency

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment
    from prometheus_client import CollectorRegistry

__all__ = ["Health", "HealthFacts", "HealthReason", "HealthServer", "ShardLag", "health_app", "verdict"]

log = logging.getLogger("kinsumer.health")

#: The reasons that fail liveness (a restart fixes them); the others fail readiness only.
LIVENESS_CODES = frozenset({"stopped", "background_error", "heartbeat_late", "handler_stuck"})
#: Seconds a heartbeat may be late beyond two heartbeat periods before liveness fails.
HEARTBEAT_MARGIN = 1.0
LIVENESS_PATH, READINESS_PATH = "/healthz", "/readyz"


@attrs.frozen
class HealthReason:
    """Why a client is not live, or not ready: ``code`` (see docs/observability.md), what an operator reads,
    and the shard it is about (``<stream>/<shard ID>`` for a stream other than the first), if one."""

    code: str
    message: str
    shard: str | None = None

    @property
    def liveness(self) -> bool:
        """It fails liveness (a restart fixes it), not only readiness."""
        return self.code in LIVENESS_CODES


@attrs.frozen
class Health:
    """A client's health: ``live`` (``/healthz``), ``ready`` (``/readyz``) and why not."""

    live: bool
    ready: bool
    reasons: tuple[HealthReason, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "live": self.live,
            "ready": self.ready,
            "reasons": [
                {"code": r.code, "message": r.message, "shard": r.shard, "liveness": r.liveness} for r in self.reasons
            ],
        }


@attrs.frozen
class ShardLag:
    """How far behind one owned shard is."""

    shard: str
    millis_behind_latest: int | None = None
    #: Seconds since the oldest record of it in hand reached the stream; None if none is held.
    oldest_record_age: float | None = None


@attrs.frozen
class HealthFacts:
    """What the verdict is made of: a snapshot of one client (seconds throughout)."""

    #: "new" (run() not called), "starting" (run() under way), "running" or "stopped"
    state: str
    #: The background error stored for the caller's next call, if one stopped the client.
    error: str | None = None
    #: Since the last heartbeat that landed began; None before the first.
    heartbeat_age: float | None = None
    #: How old the last heartbeat may be.
    heartbeat_limit: float = float("inf")
    #: ``process()`` handler calls past their timeout, still running: (shard, seconds since they began).
    stuck_calls: tuple[tuple[str, float], ...] = ()
    #: The shards this client owns (captured).
    shards: tuple[ShardLag, ...] = ()
    max_healthy_lag: float | None = None
    #: For how long the client has owned no shard while there are at least as many shards as clients.
    idle_for: float | None = None
    #: The client has owned a shard since it started.
    owned_once: bool = False
    #: How long owning none is normal once the client has owned one (a rebalance's handoff, a dead owner's age).
    idle_grace: float = 0.0
    #: The live clients of the Go library on the application, as an operator reads them: the client reads
    #: nothing while there is one.
    beside_go: tuple[str, ...] = ()


def verdict(facts: HealthFacts) -> Health:
    """The client's health from ``facts``; pure."""
    reasons = [*_liveness(facts), *_readiness(facts)]
    live = not any(r.liveness for r in reasons)
    return Health(live=live, ready=not reasons, reasons=tuple(reasons))


def _liveness(facts: HealthFacts) -> Iterable[HealthReason]:
    if facts.state == "stopped":
        yield HealthReason("stopped", "the client stopped (stop(), or a failure the caller was given)")
        return
    if facts.error is not None:
        yield HealthReason("background_error", f"a background error stopped the client: {facts.error}")
    if facts.heartbeat_age is not None and facts.heartbeat_age > facts.heartbeat_limit:
        yield HealthReason(
            "heartbeat_late",
            f"the client's last heartbeat landed {facts.heartbeat_age:.1f} s ago (more than "
            f"{facts.heartbeat_limit:g} s): the other clients may take its shards",
        )
    for shard, seconds in facts.stuck_calls:
        message = f"a process() handler call on a record of {shard} has run {seconds:.1f} s, past its timeout"
        yield HealthReason("handler_stuck", message, shard)


def _readiness(facts: HealthFacts) -> Iterable[HealthReason]:
    if facts.state in ("new", "starting"):
        said = "run() has not been called" if facts.state == "new" else "run() is under way"
        yield HealthReason("not_started", said)
        return
    if facts.state != "running":
        return
    if facts.beside_go:
        yield HealthReason(
            "beside_go",
            f"the Go library's client {', '.join(facts.beside_go)} is live on the application: this client hands its "
            "shards over and reads nothing until no Go client is live (stop the Go clients: see "
            "docs/moving-to-kinsumer.md)",
        )
    if facts.idle_for is not None and (not facts.owned_once or facts.idle_for > facts.idle_grace):
        said = "has captured no shard yet" if not facts.owned_once else f"has owned no shard for {facts.idle_for:.0f} s"
        yield HealthReason("no_shard_owned", f"the client {said} while there are shards for every client")
    limit = facts.max_healthy_lag
    if limit is None:
        return
    for shard in facts.shards:
        behind = None if shard.millis_behind_latest is None else shard.millis_behind_latest / 1000
        if behind is not None and behind > limit:
            message = f"{shard.shard} is {behind:.1f} s behind its tip (MillisBehindLatest), over max_healthy_lag"
            yield HealthReason("lag", f"{message} ({limit:g} s)", shard.shard)
        elif shard.oldest_record_age is not None and shard.oldest_record_age > limit:
            message = f"the oldest record of {shard.shard} in hand arrived {shard.oldest_record_age:.1f} s ago"
            yield HealthReason("lag", f"{message}, over max_healthy_lag ({limit:g} s)", shard.shard)


# ----------------------------------------------------------------- serving


def answer(health: Callable[[], Health], path: str) -> tuple[int, bytes] | None:
    """The status and JSON body of ``path`` (``/healthz`` or ``/readyz``); None for another path."""
    if path not in (LIVENESS_PATH, READINESS_PATH):
        return None
    try:
        now = health()
    except Exception as exc:  # a probe gets an answer, the log the trace
        log.exception("health() raised")
        return 500, json.dumps({"error": type(exc).__name__}).encode() + b"\n"
    ok = now.live if path == LIVENESS_PATH else now.ready
    return (200 if ok else 503), json.dumps(now.to_json()).encode() + b"\n"


_STATUS_TEXT = {200: "200 OK", 404: "404 Not Found", 405: "405 Method Not Allowed", 500: "500 Internal Server Error",
                503: "503 Service Unavailable"}  # fmt: skip


def health_app(health: Callable[[], Health], registry: CollectorRegistry | None = None) -> WSGIApplication:
    """A WSGI application: ``/healthz`` and ``/readyz`` from ``health()`` (200 or 503, the verdict as JSON);
    with a Prometheus ``registry`` every other path serves its metrics (``prometheus_client.make_wsgi_app``),
    else 404."""
    metrics = None
    if registry is not None:
        try:
            from prometheus_client import make_wsgi_app  # noqa: PLC0415 - an optional dependency
        except ImportError as exc:  # pragma: no cover - the extra is installed where a registry exists
            raise MissingDependency("health_app(registry=)", "the prometheus_client package", "prometheus") from exc
        metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path, method = str(environ.get("PATH_INFO") or "/"), environ.get("REQUEST_METHOD", "GET")
        ours = path in (LIVENESS_PATH, READINESS_PATH)
        if not ours and metrics is not None:
            served: Iterable[bytes] = metrics(environ, start_response)
            return served
        if ours and method not in ("GET", "HEAD"):
            status, body = 405, b'{"error": "GET only"}\n'
        else:
            status, body = answer(health, path) or (404, b'{"error": "not found: try /healthz or /readyz"}\n')
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response(_STATUS_TEXT[status], headers)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # a probe every few seconds: not for the log
        pass


class HealthServer:
    """An HTTP server on a daemon thread of its own answering ``/healthz`` and ``/readyz`` (and, with a
    Prometheus ``registry``, the metrics on every other path). ``port=0`` picks a free port (see
    :attr:`port`). :meth:`close` stops it: idempotent, bounded in time; a ``with`` block closes it too."""

    def __init__(
        self,
        health: Callable[[], Health],
        port: int = 0,
        addr: str = "127.0.0.1",
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._server = make_server(addr, port, health_app(health, registry), _Server, _QuietHandler)
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="kinsumer-health", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return str(self._server.server_address[0])

    @property
    def url(self) -> str:
        """``http://address:port`` (the paths follow)."""
        return f"http://{self.address}:{self.port}"

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving and release the port; waits up to ``timeout`` s for the thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()  # returns once serve_forever has (it looks every poll_interval)
        self._server.server_close()
        self._thread.join(timeout)

    def __enter__(self) -> HealthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
