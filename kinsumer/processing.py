"""``process*()`` and ``aprocess*()`` behind :class:`~kinsumer.Kinsumer`: their options made one
:class:`~kinsumer.handling.options.Options` (defaults written there once, and in
:data:`~kinsumer.handling.options.BATCH_DEFAULTS` for the batch calls), checked, and run by a
:class:`~kinsumer.handling.processor.Processor` over the client's delivery; an async handler's calls made
plain ones for the workers (:class:`~kinsumer.asyncio_front.LoopCalls`).

The Kinsumer keeps the state checks (started, not stopped) and its public signatures; this keeps the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ._version import __version__
from .asyncio_front import HandlerCancelled, LoopCalls
from .config import Config
from .dead_letter import check as check_sink
from .delivery.delivery import Delivery
from .errors import ConfigError, HandlerStuck
from .handling.options import BATCH_DEFAULTS, BatchOptions, Options, Origin, ProcessOptions
from .handling.processor import Processor
from .handling.tracing import tracing_for
from .stats import StatReceiver

__all__ = ["Processing", "is_async"]


def is_async(function: object) -> bool:
    """An async function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


class Processing:
    """The ``process*()`` calls of one client (see the module's description); ``leave()`` is called when a
    handler is stuck (:class:`~kinsumer.HandlerStuck`): the client leaves, its shards go to the others."""

    def __init__(
        self, delivery: Delivery, stats: StatReceiver, config: Config, origin: Origin, leave: Callable[[], None]
    ) -> None:
        self._delivery = delivery
        self._stats = stats
        self._config = config
        self._origin = origin
        self._leave = leave
        self._processors: set[Processor] = set()  # process() calls under way (their stuck handler calls)

    @staticmethod
    def options(given: ProcessOptions | BatchOptions, *, batches: bool) -> Options:
        """``process*()``'s keyword arguments, checked (a ConfigError names the first wrong one)."""
        allowed = set(attrs.fields_dict(Options)) - (set() if batches else set(BATCH_DEFAULTS))
        wrong = sorted(set(given) - allowed)
        if wrong:
            calls = "process_batches()" if batches else "process() (max_records and max_wait: process_batches())"
            raise ConfigError(wrong[0], f"is not an option of {calls}", given[wrong[0]])  # type: ignore[literal-required]
        return Options(**({**BATCH_DEFAULTS, **given} if batches else given))

    @staticmethod
    def check_handler(handler: object, *, batches: bool, called: str) -> None:
        """``handler`` fits ``called`` (``"process()"``, ``"aprocess_batches()"``...): a callable, an async one
        for the ``aprocess*()`` calls."""
        taking = "a record list" if batches else "a record"
        if called.startswith("a") and not is_async(handler):
            rule = f"must be an async function taking {taking} (a plain function goes to {called[1:]})"
            raise ConfigError("handler", rule, handler)
        if not callable(handler):
            raise ConfigError("handler", f"must be a callable taking {taking}", handler)

    def stuck_calls(self) -> tuple[tuple[str, float], ...]:
        """The handler calls past their ``timeout`` still running, of every ``process*()`` under way."""
        return tuple(call for processor in list(self._processors) for call in processor.stuck_calls())

    def run(self, handler: Callable[..., object], options: Options, *, batches: bool) -> None:
        """Handle records with ``handler`` (checked by :meth:`check_handler`) until the consumer stops
        (``process()``, ``process_batches()``)."""
        spans = self._config.handler_spans
        if spans == "off" and options.trace_context is not None:
            rule = 'does nothing with Config(handler_spans="off"), which makes no span: drop one or the other'
            raise ConfigError("trace_context", rule, options.trace_context)
        check_sink(options.dead_letter)  # a queue or stream that does not exist: said now, not at a failure
        origin = self._origin
        tracing = (
            tracing_for(origin.stream, origin.application, __version__, options.trace_context, per_run=spans == "run")
            if spans != "off"
            else None
        )
        processor = Processor(
            self._delivery, handler, options, origin, self._stats, batches=batches,
            buffer_size=self._config.buffer_size, tracing=tracing,
        )  # fmt: skip
        self._processors.add(processor)
        try:
            processor.run()
        except HandlerStuck:
            self._leave()  # the client leaves: its shards go to the others, the records in hand with them
            raise
        finally:
            self._processors.discard(processor)

    async def run_async(self, handler: Callable[..., Awaitable[object]], options: Options, *, batches: bool) -> None:
        """:meth:`run` with an async handler, awaited on the running loop (``aprocess()``, ``aprocess_batches()``)."""
        calls = LoopCalls(asyncio.get_running_loop())
        plain = calls.plain(handler, options.timeout)  # an async handler is cancelled at its timeout
        awaited: dict[str, Any] = {  # an async sink or hook is awaited on the loop
            name: calls.plain(function)
            for name in ("dead_letter", "on_assigned", "on_revoked", "on_lost")
            if (function := getattr(options, name)) is not None and is_async(function)
        }
        options = attrs.evolve(options, timeout=None, **awaited)
        work = asyncio.ensure_future(asyncio.to_thread(self.run, plain, options, batches=batches))
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            calls.cancel()  # the workers give their records back and stop
            with contextlib.suppress(BaseException):
                await asyncio.shield(work)
            raise
        except HandlerCancelled:  # a handler was cancelled by something else: its record went back
            raise asyncio.CancelledError() from None
