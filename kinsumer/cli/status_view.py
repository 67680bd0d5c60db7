"""``kinsumer status``: an application's clients, leader, shard cache and shards, as a table; and
``--watch``, which shows it again every few seconds (in place in a terminal)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import TextIO

from ..status import ApplicationStatus, ShardInfoRow

__all__ = ["render", "watch"]

#: Home, and clear what is left of each line and below the block: a refresh in place without a blank flash.
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"


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
    if shard.outside_range:
        state += f", {shard.outside_range} KPL records outside its range"
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


def watch(
    show: Callable[[], str],
    interval: float,
    out: TextIO,
    *,
    tty: bool,
    count: int | None = None,
    describe: Callable[[Exception], str] = str,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Write ``show()`` every ``interval`` seconds, ``count`` times (None: until Ctrl-C, which the caller
    catches), each under a line with the time. In a terminal (``tty``) each refresh replaces the last
    one in place; otherwise the blocks follow one another, a blank line between them. An error from
    ``show()`` (a table unreachable for a while) is shown in the block's place, as ``describe`` says it,
    and the watch goes on."""
    shown = 0
    while count is None or shown < count:
        started = time.monotonic()
        stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        try:
            text = show()
        except Exception as exc:  # noqa: BLE001 - shown, and the next refresh tries again
            text = f"error: {describe(exc)}"
        if tty:
            lines = [f"{stamp}  every {interval:g} s, Ctrl-C to stop", "", *text.splitlines()]
            out.write(HOME + "".join(line + CLEAR_LINE + "\n" for line in lines) + CLEAR_BELOW)
        else:
            out.write(("\n" if shown else "") + f"{stamp}\n{text}\n")
        out.flush()
        shown += 1
        if count is None or shown < count:
            sleep(max(0.0, interval - (time.monotonic() - started)))
