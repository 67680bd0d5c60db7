"""What a fleet's client calls: the user's handler (one for all, or one made per client) and ``process()``'s
options, each wrapped so that the ledger records it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from ._ledger import Ledger

__all__ = ["CALLS", "HOOKS", "LOOPS", "MANUAL", "Call", "PerClient", "for_client"]

HOOKS = ("on_assigned", "on_revoked", "on_lost")
#: The Kinsumer call a fleet's clients run the handler with: one of the ``process*()`` calls, or a loop over the
#: client's records (``"next"``: ``for record in k: handler(record)``; ``"anext"``: ``async for record in k: await
#: handler(record)``, which count a record processed when the next is asked for; ``"next_with_checkpointer"``:
#: ``handler(record, checkpoint)`` for each of ``next_record_with_checkpointer()``, in manual mode, where a record
#: counts as processed once its checkpoint, and those of the records of its shard before it, were called;
#: ``"anext_with_checkpointer"``: the same with ``anext_record_with_checkpointer()`` and an async handler).
Call = Literal[
    "process", "process_batches", "aprocess", "aprocess_batches", "next", "anext", "next_with_checkpointer",
    "anext_with_checkpointer",
]  # fmt: skip
CALLS: tuple[Call, ...] = (
    "process", "process_batches", "aprocess", "aprocess_batches", "next", "anext", "next_with_checkpointer",
    "anext_with_checkpointer",
)  # fmt: skip
#: The calls that checkpoint by hand (``Config.manual_checkpointing``).
MANUAL: tuple[Call, ...] = ("next_with_checkpointer", "anext_with_checkpointer")
#: The calls that loop over the client's records: no options, no lifecycle hooks (those are process()'s).
LOOPS: tuple[Call, ...] = ("next", "anext", *MANUAL)


@attrs.frozen
class PerClient:
    """A handler made for each client of a fleet, as each process makes its own (state kept in memory is then
    the client's, as in production): ``make(client_name)`` returns an object with a ``handle(record)`` method
    (``handle(record, checkpoint)`` for a fleet's manual checkpoints, ``call="next_with_checkpointer"`` or
    ``"anext_with_checkpointer"``) and, if it has them, ``on_assigned``, ``on_revoked`` and ``on_lost`` methods,
    ``process()``'s lifecycle hooks (a loop over the records calls none: with its calls, an object that has them
    is refused). Give it to :class:`~kinsumer.testing.Fleet` (or ``kinsumer_fleet``) in place of a handler."""

    make: Callable[[str], Any]


def for_client(
    ledger: Ledger,
    client: str,
    handler: Callable[..., object] | PerClient,
    options: Mapping[str, Any],
    call: Call = "process",
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The handler and the options ``client``'s ``call`` (``process()``...) is called with: the sink's calls and,
    with any hook given, all three hooks, recorded by ``ledger``. ValueError or TypeError naming what is wrong."""
    options = dict(options)
    if isinstance(handler, PerClient):
        made = handler.make(client)
        handle = getattr(made, "handle", None)
        if not callable(handle):
            raise TypeError(f"PerClient: make({client!r}) returned {made!r}, which has no handle(record) method")
        for hook in HOOKS:
            method = getattr(made, hook, None)
            if callable(method):
                if call in LOOPS:
                    raise ValueError(
                        f"PerClient: make({client!r}) returned an object with {hook}(), a hook of process(); a loop "
                        f"over the records (call={call!r}) calls no hooks"
                    )
                if options.get(hook) is not None:
                    raise ValueError(f"{hook}: given as an option and by the PerClient's object too; give it once")
                options[hook] = method
        handle_with: Callable[..., Any] = handle
    else:
        handle_with = handler
    if options.get("dead_letter") is not None:
        options["dead_letter"] = ledger.wrap_sink(client, options["dead_letter"])
    if any(options.get(hook) is not None for hook in HOOKS):
        for hook in HOOKS:
            options[hook] = ledger.wrap_hook(client, hook, options.get(hook))
    if call == "next_with_checkpointer":
        return ledger.wrap_manual(client, handle_with), options
    if call == "anext_with_checkpointer":
        return ledger.wrap_manual_async(client, handle_with), options
    batches = call.endswith("_batches")
    if call.startswith("a"):  # aprocess*(), anext
        return ledger.wrap_async(client, handle_with, batches=batches), options
    return ledger.wrap(client, handle_with, batches=batches), options
