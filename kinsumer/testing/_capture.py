"""What the ledger keeps: each capture of a shard by a client, each handling, and why a record may come twice.

A *capture* is one client's hold on one shard, from ``StatReceiver.shard_gained`` to ``shard_lost`` (the shard
worker reports both, and the handoff's verdict between them, from one coroutine, so they come in order). Each
handling belongs to the capture of its client and shard current when the handler was called: a capture hands
out records only between the two. A capture that ends without a clean handoff says why (:data:`Reason`); its
records past the checkpoint are then delivered again where the shard goes, and that explains a duplicate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

__all__ = ["Capture", "Handling", "Reason", "RecordKey", "repeat_reason"]

#: A user record: its shard, its sequence number and its index in its KPL aggregate (0 for a plain record).
RecordKey = tuple[str, str, int]

#: Why a capture ended without a clean handoff, so that records it handled may be handled again:
#:
#: - ``"crash"``: its client crashed while it held the shard (no release, no last checkpoint);
#: - ``"handoff timed out"``: its handoff took longer than ``handoff_timeout`` (``StatReceiver.handoff`` with
#:   ``clean=False``; on a loaded machine, with :data:`~kinsumer.testing.FAST_CONFIG`'s 1 s, it happens);
#: - ``"taken"``: another client took the shard from it, having found it silent for longer than
#:   ``client_record_max_age`` (a stalled process, as a crashed one; or a release that could not be stored);
#:
#: and, of one call rather than a capture:
#:
#: - ``"call timed out"``: a handler call ran past ``process()``'s ``timeout``; kinsumer abandoned it (a sync call
#:   cannot be stopped: it goes on in the background) and tried the record again, and the abandoned call
#:   returned too.
Reason = Literal["crash", "handoff timed out", "taken", "call timed out"]


@attrs.define(eq=False)
class Capture:
    """One client's hold on one shard (mutable: the ledger fills it in as events come, under its lock)."""

    client: str
    shard: str
    #: The ledger's tick at the capture (``shard_gained``), and at ``on_assigned`` (None: not announced).
    gained: int
    assigned: int | None = None
    #: ``on_assigned`` came more than once for this capture.
    assigned_again: bool = False
    #: The end hook called for it (``"on_revoked"`` or ``"on_lost"``) and its tick; None: none yet.
    end_hook: tuple[str, int] | None = None
    #: The tick at which that end hook returned; None: not (yet).
    end_hook_returned: int | None = None
    #: The tick of ``shard_lost``; None while it holds the shard.
    closed: int | None = None
    #: Why it ended without a clean handoff; None: it did not (or has not ended yet).
    reason: Reason | None = None

    def end(self, reason: Reason) -> None:
        """It ended for ``reason``, unless it is known to have ended otherwise already (the first reason stays)."""
        if self.reason is None:
            self.reason = reason

    @property
    def settled(self) -> bool:
        """Its end is known: closed (``shard_lost``), or ended for a reason."""
        return self.closed is not None or self.reason is not None


@attrs.frozen(eq=False)
class Handling:
    """One call of the handler (or of the dead-letter sink) that returned."""

    key: RecordKey
    partition_key: str
    client: str
    capture: Capture
    #: The ledger's ticks at the call and at its return.
    started: int
    ended: int
    dead_lettered: bool = False
    #: Under ``process()``'s ``timeout``: whether kinsumer abandoned the call (asked when the report is made).
    abandoned: Callable[[], bool] | None = None

    @property
    def timed_out(self) -> bool:
        """kinsumer abandoned the call past its ``timeout`` (it returned late)."""
        return self.abandoned is not None and self.abandoned()


def repeat_reason(earlier: Handling, later: Handling) -> Reason | None:
    """Why a record handled in ``earlier`` may be handled again in ``later`` (they ended in that order); None if
    nothing allows it.

    Allowed: ``earlier``'s capture ended without a clean handoff (its records past the checkpoint go again to
    the next owner); or ``later`` is a late return of a capture that ended so (a handler still running when its
    handoff timed out, or when the shard was taken) that had started before ``earlier`` returned; or either call
    ran past ``process()``'s ``timeout`` (kinsumer tried the record again without it). Else never within one
    capture: a capture hands each record out once.
    """
    if earlier.timed_out or later.timed_out:
        return "call timed out"
    if earlier.capture is later.capture:
        return None
    if earlier.capture.reason is not None:
        return earlier.capture.reason
    if later.capture.reason is not None and later.started < earlier.ended:
        return later.capture.reason
    return None
