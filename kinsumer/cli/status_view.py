"""``kinsumer status``: an application's clients, leader, shard cache and shards, as a table."""

from __future__ import annotations

from ..status import ApplicationStatus, ShardInfoRow

__all__ = ["render"]


def _short(sequence_number: str | None) -> str:
    if sequence_number is None:
        return "-"
    return sequence_number if len(sequence_number) <= 14 else "…" + sequence_number[-12:]


def _checkpoint(sequence_number: str | None, sub_sequence: int | None) -> str:
    """The sequence number, shortened, and ``/N`` inside a KPL aggregate (user record N)."""
    return _short(sequence_number) + ("" if sub_sequence is None else f"/{sub_sequence}")


def _state(shard: ShardInfoRow) -> str:
    if shard.finished:
        return "finished"
    if not shard.consumable:
        return "waiting for parents"
    if shard.owner_id is None:
        return "unowned"
    state = "reading (closed)" if shard.closed else "reading"
    if shard.careful:
        state += ", crash-loop guard on"
    if shard.retrying:
        state += f", retrying a record ({shard.retrying})"
    if shard.paused_for is not None:
        state += f", paused for {shard.paused_for:.0f} s"
    if shard.oldest_call_age is not None:
        state += f", a handler call under way for {shard.oldest_call_age:.0f} s"
    if shard.expired:
        state += f", {shard.expired} expired"
    return state


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return lines


def render(status: ApplicationStatus) -> str:
    live = [c for c in status.clients if c.live]
    names = {c.id: c.name for c in status.clients}
    out = [f"stream {status.stream}, application {status.application}", ""]
    out.append(f"clients: {len(live)} live, {len(status.clients) - len(live)} silent")
    out += _table(
        ["ID", "NAME", "HOST", "PID", "READING", "STREAMS", "HEARTBEAT", ""],
        [
            [
                c.id,
                c.name,
                c.host,
                str(c.pid or "-"),
                c.reading,
                ",".join(c.streams) or "-",
                f"{c.heartbeat_age:.1f} s ago",
                "" if c.live else "(dead)",
            ]
            for c in status.clients
        ],
    )
    leader = "none"
    if status.leader_id:
        leader = f"{status.leader_id} ({names.get(status.leader_id, '?')}), lease renewed {status.leader_age:.1f} s ago"
    out += ["", f"leader: {leader}"]
    cache_age = "never written" if status.shard_cache_age is None else f"updated {status.shard_cache_age:.1f} s ago"
    out.append(f"shard cache: {len(status.shard_cache)} consumable shards, {cache_age}")
    out += ["", "shards:"]
    out += _table(
        ["SHARD", "STATE", "OWNER", "READING", "CHECKPOINT", "LAG", "OLDEST", "ROW UPDATED"],
        [
            [
                s.shard_id,
                _state(s),
                s.owner_name or "-",
                s.reading or "-",
                _checkpoint(s.checkpoint, s.checkpoint_sub_sequence_number),
                "-" if s.millis_behind_latest is None else f"{s.millis_behind_latest} ms",
                "-" if s.oldest_record_age is None else f"{s.oldest_record_age:.1f} s",
                "-" if s.last_update_age is None else f"{s.last_update_age:.1f} s ago",
            ]
            for s in status.shards
        ],
    )
    return "\n".join(out)
