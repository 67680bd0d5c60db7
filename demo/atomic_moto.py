"""moto's server, with each DynamoDB and each Kinesis request handled whole before the next.

moto's server handles requests on threads and its backends take no lock, so two conditional
writes to one item can both pass their condition: its ``update_item`` checks the condition, then
(for a new item) validates and creates it, and a second request's check can run in between.
Measured with four threads racing ``attribute_not_exists`` updates on 400 keys and a short GIL
switch interval: 46 keys were won twice. DynamoDB guarantees a conditional write is atomic, and
kinsumer's ownership rests on it, so a test that lets two clients capture one shard in the same
millisecond would see a double owner the real service never allows (CI saw it once at startup).

Each service gets one lock (DynamoDB's conditional writes and Kinesis's sequence numbers are
atomic on AWS); other services (SQS's long polls) run unlocked as before. Run as
``python -m demo.atomic_moto -H 127.0.0.1 -p PORT``; the costs :mod:`demo.quick_moto` names are left out.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import create_backend_app
from werkzeug.serving import run_simple

from demo.quick_moto import QuickDispatch, QuietHandler, install

__all__ = ["SerialServices", "main"]

#: The ``X-Amz-Target`` prefixes of the services whose requests are serialised.
_SERIALISED = ("DynamoDB_", "Kinesis_")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class SerialServices:
    """WSGI middleware: one request at a time per serialised service. The request's body is read
    before the lock is taken and the response's body is written after it is released, so a slow or
    paused client delays no other client's request."""

    def __init__(self, app: WsgiApp) -> None:
        self._app = app
        self._locks = {prefix: threading.Lock() for prefix in _SERIALISED}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        lock = next((lock for prefix, lock in self._locks.items() if target.startswith(prefix)), None)
        if lock is None:
            return self._app(environ, start_response)
        # the body is read before the lock: a client paused mid-request (SIGSTOP) must hold up only itself
        length = int(environ.get("CONTENT_LENGTH") or 0)
        environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length) if length else b"")
        with lock:
            body = self._app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))  # as moto's own main: some services build URLs with it
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(0))
    install()
    app = QuickDispatch(create_backend_app)
    run_simple(args.host, args.port, SerialServices(app), threaded=True, request_handler=QuietHandler)


if __name__ == "__main__":
    main()
