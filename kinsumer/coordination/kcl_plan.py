"""The plan of ``kinsumer import-kcl`` and its check afterwards, from what the tables hold. Pure, no I/O.

:mod:`.kcl_import` reads the tables and writes the rows; :mod:`.kcl_leases` says what a lease maps to. Here,
per shard of the stream: KCL's checkpoint, kinsumer's row now and what the import makes of it
(:func:`plan_shards`), what the operator should know (:func:`plan_notes`), what refuses the import
(:func:`plan_problems`), and after the writes whether each row says what its lease maps to
(:func:`check_shards`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import attrs

from .checkpoints_table import CheckpointRow
from .clients_table import ClientRow
from .kcl_leases import (
    LATEST,
    SHARD_END,
    ImportedPosition,
    KclCheckpoint,
    KclLease,
    LeaseSelection,
    imported_position,
    positions_without_lease,
    time_text,
)
from .streams import StreamScope

__all__ = [
    "WRITES", "Change", "ImportCheck", "ImportPlan", "LeaseScan", "ShardCheck", "ShardImport", "StoredRows",
    "check_shards", "live_problem", "plan_notes", "plan_problems", "plan_shards", "renewed_problem", "row_text",
]  # fmt: skip

#: The checkpoints table's rows by key, each with its ``LastUpdate`` as stored (a write's condition).
StoredRows = Mapping[str, tuple[CheckpointRow, int]]

#: What the import does to a shard's row: writes it (``new``, ``replace``), leaves it (``unchanged``, ``none``:
#: nothing to import), or is refused (``held`` by a client, ``conflict``: kinsumer's own progress differs).
Change = Literal["new", "replace", "unchanged", "none", "held", "conflict"]
#: The changes that write the row.
WRITES: tuple[Change, ...] = ("new", "replace")


@attrs.frozen
class LeaseScan:
    """The leases of a lease table by ``leaseKey``, and how many items of other entities (KCL 3.5+) it holds."""

    leases: dict[str, KclLease]
    other_entities: int = 0


@attrs.frozen
class ShardImport:
    """One shard of the stream: KCL's position, kinsumer's row now, and what the import does to it."""

    shard_id: str
    key: str  # the row's key (see StreamScope.key)
    kcl: str  # the lease's checkpoint, or why there is no lease
    lease_key: str | None
    lease_checkpoint: KclCheckpoint | None
    position: ImportedPosition | None  # None: nothing to import
    parents: tuple[str, ...]
    row: CheckpointRow | None
    row_last_update: int | None  # the row's LastUpdate as stored: the write's condition
    change: Change


@attrs.frozen
class ImportPlan:
    """What an import will write, what it leaves, and why it is refused (``problems``), if it is."""

    lease_table: str
    app: str
    stream: str
    identity: str
    home: bool
    kcl_stream: str | None  # the KCL stream identifier of a multi-stream table
    imported_at: int  # epoch ms
    shards: tuple[ShardImport, ...]
    notes: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def scope(self) -> StreamScope:
        return StreamScope(self.stream, self.identity, self.home)

    @property
    def writes(self) -> tuple[ShardImport, ...]:
        return tuple(shard for shard in self.shards if shard.change in WRITES)

    def describe(self) -> str:
        """The plan for an operator: a line per shard, then the notes and the problems."""
        source = f"KCL lease table {self.lease_table}" + (f" (stream {self.kcl_stream})" if self.kcl_stream else "")
        lines = [f"{source} -> {self.app}_checkpoints, stream {self.stream} ({self.identity})"]
        rows = [("SHARD", "KCL LEASE", "KINSUMER NOW", "KINSUMER AFTER", "CHANGE")]
        for shard in self.shards:
            after = str(shard.position) if shard.position is not None else "(its initial_position)"
            rows.append((shard.shard_id, shard.kcl, row_text(shard.row, self.identity), after, shard.change))
        lines += _table(rows)
        lines += [f"note: {note}" for note in self.notes]
        lines += [f"refused: {problem}" for problem in self.problems]
        return "\n".join(lines)


def plan_shards(
    selection: LeaseSelection,
    listing: Mapping[str, tuple[str, ...]],
    rows: StoredRows,
    scope: StreamScope,
    *,
    imported_at: int,
    at_timestamp: int | None,
    overwrite: bool,
) -> list[ShardImport]:
    """Each shard of the listing (``listing``: shard ID -> parents): its lease, its row, and what the import
    does (see :data:`WRITES`)."""
    leases = {lease.shard_id: lease for lease in selection.leases}
    without = positions_without_lease(listing, set(leases) & set(listing))
    planned = []
    for shard_id in sorted(listing):
        row, stored = rows.get(scope.key(shard_id), (None, None))
        lease = leases.get(shard_id)
        position: ImportedPosition | None = None
        if lease is not None:
            kcl = str(lease.checkpoint)
            position = imported_position(lease.checkpoint, imported_at=imported_at, at_timestamp=at_timestamp)
            if lease.checkpoint.sentinel == LATEST and _started_only(row, scope.identity):
                assert row is not None and row.start_at is not None
                position = ImportedPosition(start_at=row.start_at)  # an earlier import's time: read from there
        elif shard_id in without:
            position, why = without[shard_id]
            kcl = f"none ({why})"
        else:
            kcl = "none"
        change = _change(position, row, scope.identity, listing[shard_id], overwrite)
        planned.append(
            ShardImport(
                shard_id, scope.key(shard_id), kcl, lease.lease_key if lease else None,
                lease.checkpoint if lease else None, position, listing[shard_id], row, stored, change,
            )
        )  # fmt: skip
    return planned


def _started_only(row: CheckpointRow | None, identity: str) -> bool:
    """A free row of the stream with a start time and no progress (an earlier import's LATEST)."""
    return (
        row is not None and row.owner_id is None and row.stream == identity and row.start_at is not None
        and row.checkpoint is None and not row.finished
    )  # fmt: skip


def _change(
    position: ImportedPosition | None,
    row: CheckpointRow | None,
    identity: str,
    parents: tuple[str, ...],
    overwrite: bool,
) -> Change:
    if position is None:
        return "none"
    if row is None:
        return "new"
    if row.owner_id is not None:
        return "held"
    if position.agrees_with(row) and row.stream == identity and row.parent_shard_ids == parents:
        return "unchanged"
    if row.foreign(identity) or (row.checkpoint is None and not row.finished):
        return "replace"  # of another incarnation of the stream, or with no records processed
    return "replace" if overwrite else "conflict"


def row_text(row: CheckpointRow | None, identity: str) -> str:
    """A row's position as the plan and the check show it."""
    if row is None:
        return "no row"
    if row.owner_id is not None:
        return f"held by {row.owner_name or row.owner_id}"
    if row.foreign(identity):
        return "of an earlier stream"
    if row.finished:
        return "finished"
    if row.checkpoint is not None:
        return str(ImportedPosition(checkpoint=row.checkpoint))
    if row.start_at is not None:
        return str(ImportedPosition(start_at=row.start_at))
    return "no progress"


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [" ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]) for row in rows]


def _ids(shards: Iterable[ShardImport]) -> str:
    return ", ".join(shard.shard_id for shard in shards)


def plan_notes(
    selection: LeaseSelection,
    shards: list[ShardImport],
    listing: Mapping[str, tuple[str, ...]],
    scan: LeaseScan,
    imported_at: int,
) -> list[str]:
    notes = []
    if not selection.leases and selection.problem is None:
        notes.append("the lease table holds no lease of the stream: there is nothing to import")
    if latest := [s for s in shards if s.lease_checkpoint is not None and s.lease_checkpoint.sentinel == LATEST]:
        notes.append(
            f"LATEST ({_ids(latest)}): KCL starts such a shard at its newest record whenever a worker starts it; "
            f"kinsumer starts it at the import's time ({time_text(imported_at)}, or an earlier import's), and so "
            "also reads what is written between the import and its first client"
        )
    if unleased := [s for s in shards if s.lease_key is None and s.position is None]:
        notes.append(
            f"no lease ({_ids(unleased)}): kinsumer starts these at its Config.initial_position (KCL would at its "
            "initialPositionInStream)"
        )
    leases = {lease.shard_id: lease for lease in selection.leases}
    for shard_id, lease in sorted(leases.items()):
        if lease.pending_checkpoint is not None:
            notes.append(
                f"{shard_id}: the pending checkpoint {lease.pending_checkpoint} (prepareCheckpoint) is not carried "
                "over: KCL resumes from the checkpoint too, and hands the pending one to initialize()"
            )
        if lease.checkpoint_owner is not None:
            notes.append(
                f"{shard_id}: a graceful handoff from {lease.checkpoint_owner} was under way: the checkpoint is the "
                "last it wrote"
            )
        if shard_id in listing and lease.parent_shard_ids and set(lease.parent_shard_ids) != set(listing[shard_id]):
            named, listed = ", ".join(lease.parent_shard_ids), ", ".join(listing[shard_id]) or "none"
            notes.append(f"{shard_id}: the lease names other parents ({named}) than the stream ({listed}): the "
                         "stream's are written")  # fmt: skip
    if gone := sorted(shard_id for shard_id in leases if shard_id not in listing):
        unfinished = [s for s in gone if leases[s].checkpoint.sentinel != SHARD_END]
        notes.append(
            f"leases of shards the stream no longer lists (past its retention) are left out: {', '.join(gone)}"
            + (
                f"; {', '.join(unfinished)} had not reached SHARD_END: their unread records expired"
                if unfinished
                else ""
            )
        )
    if selection.others:
        notes.append(f"the table's leases of other streams are not imported ({', '.join(selection.others)}): "
                     "import each with its own --stream")  # fmt: skip
    if scan.other_entities:
        notes.append(f"{scan.other_entities} items of KCL's other entities (worker metrics, coordinator state) "
                     "are left out")  # fmt: skip
    return notes


def plan_problems(
    app: str,
    stream: str,
    lease_table: str,
    selection: LeaseSelection,
    shards: list[ShardImport],
    listing: Mapping[str, tuple[str, ...]],
) -> list[str]:
    problems = [] if selection.problem is None else [selection.problem]
    if selection.leases and not any(lease.shard_id in listing for lease in selection.leases):
        examples = ", ".join(sorted(lease.shard_id for lease in selection.leases)[:3])
        problems.append(
            f"none of the {len(selection.leases)} leases of {lease_table} is of a shard of {stream} ({examples}...): "
            f"is it the lease table of {stream}'s KCL application?"
        )
    if timed := [s for s in shards if s.lease_key is not None and s.position is None]:
        problems.append(
            f"the leases of {_ids(timed)} say AT_TIMESTAMP: KCL starts them at the timestamp of its configuration "
            "(initialPositionInStream), which the lease does not hold: pass --at-timestamp with that time"
        )
    if held := [s for s in shards if s.change == "held"]:
        owners = ", ".join(sorted({s.row.owner_name or s.row.owner_id or "" for s in held if s.row}))
        problems.append(
            f"kinsumer clients ({owners}) hold the rows of {_ids(held)}: stop every client of {app} (a clean stop "
            f"releases its rows); a row still held by a client that died is freed by `kinsumer reset --app {app} "
            f"--stream {stream} --to TRIM_HORIZON --shard ID`; then run the import again"
        )
    if conflicts := [s for s in shards if s.change == "conflict"]:
        problems.append(
            f"the rows of {_ids(conflicts)} hold kinsumer's own progress, not KCL's: pass --overwrite to replace it "
            "with KCL's (what kinsumer processed after KCL's checkpoint is delivered again)"
        )
    return problems


def renewed_problem(renewed: Sequence[KclLease], failover_time: float) -> str:
    leases = ", ".join(f"{lease.lease_key} (owner {lease.owner})" for lease in renewed)
    return (
        f"KCL workers renewed leases within {failover_time:g} s: {leases}; stop every worker of the KCL application "
        "and run the import again (or --force it: a live worker goes on reading and checkpointing in KCL's table)"
    )


def live_problem(app: str, live: Sequence[ClientRow]) -> str:
    names = ", ".join(f"{c.name or c.id} ({c.id}, on {c.host or 'an unknown host'})" for c in live)
    return f"clients of {app} are running: {names}; stop them first (a live owner would overwrite the import)"


@attrs.frozen
class ShardCheck:
    """One shard after the import: where KCL's lease and kinsumer's row say it goes on, and whether they agree."""

    shard_id: str
    kcl: str
    kinsumer: str
    agrees: bool


@attrs.frozen
class ImportCheck:
    """Both tables read back after an import."""

    shards: tuple[ShardCheck, ...]

    @property
    def differing(self) -> tuple[str, ...]:
        return tuple(shard.shard_id for shard in self.shards if not shard.agrees)

    def describe(self) -> str:
        rows = [("SHARD", "KCL LEASE", "KINSUMER ROW", "CHECK")]
        rows += [(s.shard_id, s.kcl, s.kinsumer, "ok" if s.agrees else "DIFFERS") for s in self.shards]
        verdict = "every shard goes on in kinsumer where KCL's lease says"
        if self.differing:
            verdict = f"{len(self.differing)} shards differ: {', '.join(self.differing)}"
        return "\n".join([*_table(rows), verdict])


def check_shards(plan: ImportPlan, leases: Mapping[str, KclLease], rows: StoredRows) -> ImportCheck:
    """After the writes, with both tables read again: each imported shard's row says what its lease maps to,
    and the lease still says what the plan read."""
    checked = []
    for shard in plan.shards:
        lease = leases.get(shard.lease_key) if shard.lease_key else None
        row = rows[shard.key][0] if shard.key in rows else None
        kcl = str(lease.checkpoint) if lease is not None else shard.kcl
        agrees = (lease.checkpoint if lease is not None else None) == shard.lease_checkpoint
        if shard.position is not None:
            agrees = agrees and row is not None and row.owner_id is None and row.stream == plan.identity
            agrees = agrees and row is not None and shard.position.agrees_with(row)
        checked.append(ShardCheck(shard.shard_id, kcl, row_text(row, plan.identity), agrees))
    return ImportCheck(tuple(checked))
