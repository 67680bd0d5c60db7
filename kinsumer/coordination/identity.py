"""One process per client id: the first heartbeat claims the client's row, or says who holds it.

A ``client_id`` fixed in the Config keeps an identity across restarts; started twice by
mistake, both processes would heartbeat one row, compute one index and read the same shards.
So the first heartbeat writes the row only if it is free, stale (older than
``client_record_max_age``), or left by a process known to be gone: one on this host whose pid
no longer runs, or this very pid when no Kinsumer of this process uses the id (a container
restarted under its old hostname and pid). Otherwise :func:`claim_row` raises
:class:`~kinsumer.ClientIdInUse`.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from ..aws.tables import now_ms
from ..errors import ClientIdInUse
from . import clients_table
from .clients_table import ClientRow

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["claim_row", "release_row", "taken_over"]

_lock = threading.Lock()
_in_process: set[tuple[str, str]] = set()  # (clients table, client id) of the running Kinsumers of this process


def claim_row(
    db: DynamoDBClient,
    table: str,
    client_id: str,
    name: str,
    instance: str,
    max_age: float,
    reading: str = "polling",
    streams: tuple[str, ...] = (),
) -> None:
    """Write the client's first heartbeat, or raise :class:`ClientIdInUse` naming who holds the id."""
    key = (table, client_id)
    with _lock:
        here = key in _in_process
        _in_process.add(key)
    try:

        def claim(replacing: int) -> ClientRow | None:
            stale = now_ms() - int(max_age * 1000)
            return clients_table.claim(
                db,
                table,
                client_id,
                name,
                instance,
                stale_ms=stale,
                replacing=replacing,
                reading=reading,
                streams=streams,
            )

        holder = claim(-1)
        for _ in range(2):  # a dead process's row: take it, unless it changed meanwhile
            if holder is None or not _gone(holder, here):
                break
            holder = claim(holder.last_update)
        if holder is not None:
            raise ClientIdInUse(client_id, holder.host, holder.pid, max(0, now_ms() - holder.last_update) / 1000)
    except BaseException:
        if not here:
            release_row(table, client_id)
        raise


def release_row(table: str, client_id: str) -> None:
    """This process no longer runs a Kinsumer with ``client_id`` (it stopped)."""
    with _lock:
        _in_process.discard((table, client_id))


def taken_over(client_id: str, holder: ClientRow) -> ClientIdInUse:
    """The error of a client whose row another process claimed while it could not heartbeat."""
    return ClientIdInUse(
        client_id, holder.host, holder.pid, max(0, now_ms() - holder.last_update) / 1000, taken_over=True
    )


def _gone(holder: ClientRow, used_here: bool) -> bool:
    """The process that wrote ``holder`` is known to have ended."""
    if holder.host != clients_table.this_host() or holder.pid <= 0:
        return False  # another host: only its heartbeat's age tells
    if holder.pid == os.getpid():
        return not used_here  # this process, which runs no other Kinsumer with this id: an earlier run of it
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it runs, as another user
    return False
