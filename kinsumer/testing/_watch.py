"""What a fleet watches of its clients for the ledger: captures and handoffs (a :class:`~kinsumer.StatReceiver`,
chained to the user's own), and shards taken from a silent client (the checkpoint table's captures)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..stats import StatReceiver
from ._ledger import Ledger
from ._tables import LocalDynamoDB

__all__ = ["fleet_stats", "watch_takeovers"]

_WATCHED = ("shard_gained", "shard_lost", "handoff")


class _FleetStats(StatReceiver):
    """Tells the ledger of ``client``'s captures and handoffs, then passes the call on to ``inner``."""

    def __init__(self, ledger: Ledger, client: str, inner: StatReceiver) -> None:
        self._ledger, self._client, self.inner = ledger, client, inner

    def shard_gained(self, shard_id: str) -> None:
        self._ledger.gained(self._client, shard_id)
        self.inner.shard_gained(shard_id)

    def shard_lost(self, shard_id: str) -> None:
        self._ledger.lost(self._client, shard_id)
        self.inner.shard_lost(shard_id)

    def handoff(self, shard_id: str, seconds: float, clean: bool) -> None:
        self._ledger.handoff(self._client, shard_id, clean)
        self.inner.handoff(shard_id, seconds, clean)


def _forward(name: str) -> Callable[..., None]:
    def method(self: _FleetStats, *args: Any) -> None:
        getattr(self.inner, name)(*args)

    method.__name__ = method.__qualname__ = name
    return method


_CLASSES: dict[type, type[_FleetStats]] = {}


def _chained(kind: type) -> type[_FleetStats]:
    """A receiver class that passes on every call ``kind`` overrides (so that kinsumer still skips the
    per-record calls a receiver ignores)."""
    if kind not in _CLASSES:
        base = vars(StatReceiver)
        methods = [n for n in base if not n.startswith("_") and n not in _WATCHED]
        overridden = [n for n in methods if getattr(kind, n, None) is not base[n]]  # a duck type's: all
        _CLASSES[kind] = type(f"FleetStats_{kind.__name__}", (_FleetStats,), {n: _forward(n) for n in overridden})
    return _CLASSES[kind]


def fleet_stats(ledger: Ledger, client: str, inner: StatReceiver) -> StatReceiver:
    """The receiver for ``client``'s Config: the ledger's, chained to ``inner`` (the user's ``Config.stats``)."""
    return _chained(type(inner))(ledger, client, inner)


def watch_takeovers(dynamodb: LocalDynamoDB, clients: Mapping[str, str], ledger: Ledger) -> None:
    """Tell ``ledger`` of each shard a client captures from another that did not release it (found silent):
    the capture's answer names the row's owner before it (``PreviousOwner``). ``clients``: client ID -> name."""

    def after_update(parsed: Mapping[str, Any], **_: Any) -> None:
        item = parsed.get("Attributes") or {}
        previous, owner = _text(item, "PreviousOwner"), _text(item, "OwnerID")
        shard = _text(item, "Shard")
        if previous and shard and previous != owner and previous in clients:
            ledger.taken(clients[previous], shard)

    dynamodb.meta.events.register("after-call.dynamodb.UpdateItem", after_update)


def _text(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    return value.get("S") if isinstance(value, dict) else None
