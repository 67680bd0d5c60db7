"""The report: the handlings a ledger recorded, held against the records put and against kinsumer's promises."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..reading.kpl import deaggregate
from ._capture import Capture, Handling, Reason, RecordKey, repeat_reason
from ._stream import StoredRecord

__all__ = ["Duplicate", "HookViolation", "Report", "build_report"]


@attrs.frozen
class Duplicate:
    """A record handled more than once: by which clients, in the order the calls returned, and why each handling
    after the first is allowed (``reasons[i]`` for the handling ``i + 1``; None: nothing allows it)."""

    key: RecordKey
    clients: tuple[str, ...]
    reasons: tuple[Reason | None, ...]

    @property
    def reason(self) -> Reason | None:
        """Why the record was handled again (the first repeat's reason); None if a repeat is not allowed."""
        return None if None in self.reasons else self.reasons[0]

    @property
    def allowed(self) -> bool:
        """Every repeat is allowed (after a crash, a handoff that timed out, or the shard taken)."""
        return self.reason is not None


@attrs.frozen
class HookViolation:
    """The lifecycle hooks of ``client`` for ``shard`` came out of order: ``problem`` says how."""

    client: str
    shard: str
    problem: str


@attrs.frozen
class Report:
    """What the handlers did with the records put (see :class:`~kinsumer.testing.Ledger`)."""

    put: int
    #: Handler calls that returned, repeats included (the dead-letter sink's calls are in :attr:`dead_lettered`).
    handled: int
    #: Records neither handled nor dead-lettered: kinsumer promises none, ever.
    lost: tuple[RecordKey, ...]
    duplicates: tuple[Duplicate, ...]
    #: Shards whose records were first handled out of their order.
    shards_out_of_order: tuple[str, ...]
    #: Partition keys whose records were first handled out of the order they were put.
    keys_out_of_order: tuple[str, ...]
    #: Records the dead-letter sink took (``process(dead_letter=...)``): handled, for :attr:`lost`.
    dead_lettered: tuple[RecordKey, ...] = ()
    #: Records handled only in captures that ended without a clean handoff (a crash, a handoff that timed out,
    #: the shard taken), and never again: what a handler kept of them in memory, not yet written out, is gone,
    #: and kinsumer does not deliver them again (the checkpoint had passed them; with manual checkpoints, those
    #: the handler checkpointed: the others are :attr:`not_checkpointed`).
    stranded: tuple[RecordKey, ...] = ()
    #: Lifecycle hooks out of order: a record handled before ``on_assigned`` or after ``on_revoked``,
    #: ``on_revoked`` before the capture's last record was done, ``on_assigned`` twice for one capture, an end
    #: hook (``on_revoked``, ``on_lost``) without an ``on_assigned`` before it that no other end hook took.
    hook_violations: tuple[HookViolation, ...] = ()
    #: Per partition key, the handler's calls made in captures that ended in ``on_revoked`` (as often as made):
    #: what a handler that writes its per-shard state out in ``on_revoked`` and drops it in ``on_lost`` has
    #: written, once every capture ended (after the fleet's end). Without a crash, a timed-out handoff or a
    #: shard taken, that is each record once (:meth:`by_key`); with them, the :attr:`stranded` records are
    #: missing, and a record can be there twice (:attr:`duplicates` say why). Empty without hooks.
    revoked_by_key: Mapping[str, int] = attrs.field(factory=dict)
    #: How the captures ended, counted: ``"clean"`` (a clean handoff, or the shard read to its end), a
    #: :data:`~kinsumer.testing.Reason`, or ``"open"`` (still held).
    captures_by_end: Mapping[str, int] = attrs.field(factory=dict)
    #: The partition key of each record put.
    partition_keys: Mapping[RecordKey, str] = attrs.field(factory=dict, repr=False)
    #: Manual checkpoints (``call="next_with_checkpointer"``): records handled whose checkpoint never counted (not
    #: called, or called only after the shard had moved, or a record of the shard before them never checkpointed):
    #: the next owner of their shard delivers them again, as it would after a stop. Not a fault of kinsumer's
    #: (:attr:`ok` does not look at it): the handler's choice, or its bug. Empty in other calls.
    not_checkpointed: tuple[RecordKey, ...] = ()

    @property
    def unexplained_duplicates(self) -> tuple[Duplicate, ...]:
        """Duplicates nothing allows (after a clean handoff, a clean stop, or within one capture)."""
        return tuple(d for d in self.duplicates if not d.allowed)

    @property
    def duplicates_by_reason(self) -> dict[str, int]:
        """How many records were handled again, by :attr:`Duplicate.reason` (``"unexplained"`` for None)."""
        return dict(collections.Counter(d.reason or "unexplained" for d in self.duplicates))

    @property
    def ok(self) -> bool:
        """Nothing lost, no duplicate unexplained, order kept per shard and per key, hooks in order."""
        return not (
            self.lost or self.unexplained_duplicates or self.shards_out_of_order or self.keys_out_of_order
            or self.hook_violations
        )  # fmt: skip

    def by_key(self, without: Iterable[RecordKey] = ()) -> dict[str, int]:
        """How many records of each partition key were put, but those in ``without`` (as :attr:`stranded`): what
        a handler counting records per key should have counted."""
        left_out = set(without)
        return dict(collections.Counter(pk for key, pk in self.partition_keys.items() if key not in left_out))

    def __str__(self) -> str:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.duplicates_by_reason.items())) or "none"
        return (
            f"{self.put} records put, {self.handled} handlings, {len(self.dead_lettered)} dead-lettered: "
            f"{len(self.lost)} lost, {len(self.duplicates)} handled more than once ({reasons}), "
            f"{len(self.stranded)} stranded, {len(self.shards_out_of_order)} shards and "
            f"{len(self.keys_out_of_order)} keys out of order, {len(self.hook_violations)} hook violations"
            + (f", {len(self.not_checkpointed)} not checkpointed" if self.not_checkpointed else "")
        )


def build_report(
    put: Iterable[StoredRecord], handlings: Sequence[Handling], captures: Sequence[Capture],
    orphans: Sequence[HookViolation], hooks_checked: bool, shard_order: bool = True,
) -> Report:  # fmt: skip
    """The report of ``handlings`` (in the order they returned) against the records ``put``; per shard order only
    with ``shard_order`` (``process(ordering="key")`` with several workers promises it per key only)."""
    expected = _user_records(put)
    order = {key: i for i, (key, _) in enumerate(expected)}
    keys = dict(expected)
    calls = [h for h in handlings if not h.dead_lettered]
    seen: dict[RecordKey, list[Handling]] = {}
    for h in handlings:
        seen.setdefault(h.key, []).append(h)
    duplicates = [
        Duplicate(key, tuple(h.client for h in hs), tuple(repeat_reason(a, b) for a, b in itertools.pairwise(hs)))
        for key, hs in seen.items()
        if len(hs) > 1
    ]
    firsts = [key for _, key in sorted(((hs[0].ended, key) for key, hs in seen.items() if key in order))]
    not_checkpointed = tuple(
        key for key, hs in seen.items() if hs[0].capture.manual and not any(h.capture.committed(h.key) for h in hs)
    )
    unchecked = set(not_checkpointed)
    return Report(
        put=len(expected),
        handled=len(calls),
        lost=tuple(key for key, _ in expected if key not in seen),
        duplicates=tuple(duplicates),
        shards_out_of_order=_out_of_order([(key[0], order[key]) for key in firsts]) if shard_order else (),
        keys_out_of_order=_out_of_order([(keys[key], order[key]) for key in firsts]),
        dead_lettered=tuple(dict.fromkeys(h.key for h in handlings if h.dead_lettered)),
        stranded=tuple(
            key for key, hs in seen.items() if key not in unchecked and all(h.capture.reason is not None for h in hs)
        ),
        hook_violations=(*orphans, *_hook_violations(captures, handlings, hooks_checked)),
        revoked_by_key=dict(collections.Counter(h.partition_key for h in calls if _revoked(h.capture))),
        captures_by_end=dict(collections.Counter(_end(c) for c in captures)),
        partition_keys=keys,
        not_checkpointed=not_checkpointed,
    )


def _end(capture: Capture) -> str:
    return capture.reason or ("open" if capture.closed is None else "clean")


def _revoked(capture: Capture) -> bool:
    return capture.end_hook is not None and capture.end_hook[0] == "on_revoked"


def _hook_violations(
    captures: Sequence[Capture], handlings: Sequence[Handling], hooks_checked: bool
) -> list[HookViolation]:
    """Per capture: ``on_assigned`` once, before its first record; ``on_revoked`` after its last record is done
    (``on_lost`` is not waited for: records may still be in handlers, as the docs say); and per client and shard,
    a capture's ``on_assigned`` after the end hook of the capture before returned (hooks of one shard never
    overlap). An end hook with no announced capture left to end is one of the ledger's orphans."""
    by_capture: dict[int, list[Handling]] = {}
    for h in handlings:
        by_capture.setdefault(id(h.capture), []).append(h)
    found = []
    for capture in captures:
        hs = by_capture.get(id(capture), [])

        def violation(problem: str, capture: Capture = capture) -> None:
            found.append(HookViolation(capture.client, capture.shard, problem))

        if capture.assigned_again:
            violation("on_assigned called twice for one capture")
        if not hooks_checked:
            continue
        if hs and capture.assigned is None:
            violation("records handled without on_assigned")
        elif capture.assigned is not None and any(h.started < capture.assigned for h in hs):
            violation("a record handled before on_assigned")
        if capture.end_hook is not None and capture.end_hook[0] == "on_revoked":
            at = capture.end_hook[1]
            if any(h.started > at for h in hs):
                violation("a record handled after on_revoked")
            elif any(h.ended > at for h in hs):
                violation("on_revoked called before the capture's last record was done")
    if hooks_checked:
        found += _overlapping_hooks(captures)
    return found


def _overlapping_hooks(captures: Sequence[Capture]) -> list[HookViolation]:
    """Captures of one shard by one client whose ``on_assigned`` came before the end hook of the capture before
    it had returned (or had even begun)."""
    by_shard: dict[tuple[str, str], list[Capture]] = {}
    for capture in captures:
        by_shard.setdefault((capture.client, capture.shard), []).append(capture)
    found = []
    for group in by_shard.values():
        announced = sorted((c for c in group if c.assigned is not None), key=lambda c: c.gained)
        for before, after in itertools.pairwise(announced):
            assert after.assigned is not None
            returned = before.end_hook_returned
            if before.end_hook is not None and (returned is None or returned > after.assigned):
                problem = f"on_assigned while the {before.end_hook[0]} of the capture before had not returned"
                found.append(HookViolation(after.client, after.shard, problem))
    return found


def _user_records(put: Iterable[StoredRecord]) -> list[tuple[RecordKey, str]]:
    """Each user record put, (key, partition key), in the order they were put (by sequence number)."""
    found: list[tuple[RecordKey, str]] = []
    for record in sorted(put, key=lambda r: int(r.sequence_number)):
        users: Sequence[dict[str, Any]] = deaggregate([record.to_api()])[0]
        for user in users:
            key = (record.shard_id, record.sequence_number, user.get("SubSequenceNumber") or 0)
            found.append((key, user["PartitionKey"]))
    return found


def _out_of_order(groups: list[tuple[str, int]]) -> tuple[str, ...]:
    """The groups whose positions, taken in handling order, do not increase."""
    last: dict[str, int] = {}
    bad: set[str] = set()
    for group, position in groups:
        if position < last.get(group, -1):
            bad.add(group)
        last[group] = max(position, last.get(group, -1))
    return tuple(sorted(bad))
