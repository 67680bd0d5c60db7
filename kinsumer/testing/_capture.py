"""What the ledger keeps: each capture of a shard by a client, each handling, and why a record may come twice.

A *capture* is one client's hold on one shard, from ``StatReceiver.shard_gained`` to ``shard_lost`` (the shard
worker reports both, and the handoff's verdict between them, from one coroutine, so they come in order). Each
handling belongs to the capture of its client and shard current when the handler was called: a capture hands
out records only between the two. A capture that ends without a clean handoff says why (:data:`Reason`); its
records past the checkpoint are then delivered again where the shard goes, and that explains a duplicate. With
manual checkpoints, a capture also keeps the records it delivered and those whose checkpoint was called in time:
its end stores a checkpoint after the contiguous prefix of them, and only the records past it come again.
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
#:   returned too;
#:
#: and, with manual checkpoints (a fleet's ``call="next_with_checkpointer"``), of one record in a capture that did
#: not end in a crash or with the shard taken:
#:
#: - ``"not checkpointed"``: when the capture gave the shard up, the record's checkpoint had not been called, or
#:   that of a record of its shard delivered before it (the stored checkpoint advances over the contiguous prefix
#:   of records checkpointed). A handoff waits ``handoff_timeout`` for the checkpoints of the records delivered,
#:   then releases the shard at that prefix (a handoff kinsumer reports as not clean): the records after it are
#:   delivered again where the shard goes. A checkpoint called after the release does nothing.
Reason = Literal["crash", "handoff timed out", "taken", "call timed out", "not checkpointed"]


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
    #: Its records came with checkpoints (manual mode): what its end committed is what they checkpointed.
    manual: bool = False
    #: Manual mode: the records delivered, in the order they were (the shard's), and where each is in it.
    delivered: list[RecordKey] = attrs.field(factory=list, repr=False)
    _position: dict[RecordKey, int] = attrs.field(factory=dict, repr=False)
    #: Manual mode: the records whose checkpoint was called while the capture held the shard (it counted).
    checkpointed: set[RecordKey] = attrs.field(factory=set, repr=False)
    #: Manual mode: how many of :attr:`delivered`, from the first, were checkpointed (the contiguous prefix).
    prefix: int = 0

    def end(self, reason: Reason) -> None:
        """It ended for ``reason``, unless it is known to have ended otherwise already (the first reason stays)."""
        if self.reason is None:
            self.reason = reason

    def deliver(self, key: RecordKey) -> None:
        """Manual mode: the record ``key`` was delivered (its handler is called with its checkpoint)."""
        self.manual = True
        if key not in self._position:
            self._position[key] = len(self.delivered)
            self.delivered.append(key)
            self._advance()

    def checkpoint(self, key: RecordKey) -> None:
        """Manual mode: the checkpoint of ``key`` was called while the capture held the shard."""
        self.checkpointed.add(key)
        self._advance()

    def _advance(self) -> None:
        while self.prefix < len(self.delivered) and self.delivered[self.prefix] in self.checkpointed:
            self.prefix += 1

    def committed(self, key: RecordKey) -> bool:
        """Manual mode: ``key`` and every record delivered before it were checkpointed while the capture held the
        shard: the capture's end (a release) stored a checkpoint at or past it."""
        position = self._position.get(key)
        return position is not None and position < self.prefix

    def may_repeat(self, key: RecordKey) -> Reason | None:
        """Why the record ``key``, handled in this capture, may be delivered again after it: its :attr:`reason`;
        in manual mode, unless the client crashed or the shard was taken, ``"not checkpointed"`` if the record was
        past the checkpoints called, else nothing (its end stored a checkpoint past it)."""
        if self.manual and self.reason not in ("crash", "taken"):
            return None if self.committed(key) else "not checkpointed"
        return self.reason

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

    Allowed: ``earlier``'s capture ended without a clean handoff (its records past the checkpoint go again to the
    next owner), or, in manual mode, before the record was checkpointed; or ``later`` is a late return of a capture
    that ended so (a handler still running when its handoff timed out, or when the shard was taken) that had started
    before ``earlier`` returned; or either call ran past ``process()``'s ``timeout`` (kinsumer tried the record
    again without it). Else never within one capture: a capture hands each record out once.
    """
    if earlier.timed_out or later.timed_out:
        return "call timed out"
    if earlier.capture is later.capture:
        return None
    reason = earlier.capture.may_repeat(earlier.key)
    if reason is not None:
        return reason
    reason = later.capture.may_repeat(later.key)
    if reason is not None and later.started < earlier.ended:
        return reason
    return None
