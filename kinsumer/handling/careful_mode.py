"""``process()`` in the crash-loop guard's careful mode: a shard's records one marker at a time, alone.

During an episode (see :mod:`.careful`) each marker is stored before the records it covers go to a
handler, and each handler call runs alone in the process (an exclusive section), so a death
during it is on its records. A record the episode has blamed ``max_attempts`` times goes to the
dead-letter sink (``reason="crashed"``) without a call.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from ..delivery.delivery import Taken
from ..failure import Failure
from ..reading.position import Position
from ..record import Record
from .attempts import Attempts
from .guard import ShardGuard
from .options import Origin

__all__ = ["CurrentJob", "handle_carefully", "position_of"]


class CurrentJob(Protocol):
    """The records of the calling worker's job not done yet (``shard_jobs.JobRecords``)."""

    current: list[Taken]


def position_of(record: Record) -> Position:
    return record.sequence_number, record.sub_sequence_number


def handle_carefully(
    items: list[Taken],
    guard: ShardGuard,
    attempts: Attempts,
    exclusive: Callable[[], AbstractContextManager[None]],
    origin: Origin,
    job: CurrentJob,
) -> list[Taken]:
    """Handle ``items`` (records of one capture, in order) while the episode lasts; the records not done:
    for normal mode once the episode is over, else (a stop, the shard given up) to give back.
    ``exclusive``: a handler section alone in the process; ``job.current`` is kept to the records of
    the worker's job not done yet."""
    with exclusive():
        progress = items[0][1]
        while items and guard.careful:
            record, progress, token = items[0]
            following = [position_of(r) for r, _, _ in items[1:]]
            action, episode = guard.plan(position_of(record), following)
            if action == "dead-letter":
                deaths = guard.deaths(position_of(record))
                why = f"{deaths} processes died while it was in their handler"
                attempts.exhausted(Failure(record, deaths, "crashed", why, *origin.of(record)), progress)
            else:
                if action == "mark" and (episode is None or not guard.mark(episode, progress.checkpoint)):
                    return items
                if attempts.until_done(record, progress, exclusive=True) == "left":
                    return items
            progress.ack(token)
            items = items[1:]
            job.current = items + [t for t in job.current if t[1] is not progress]
            if not guard.finish(position_of(record), progress.checkpoint, token + 1):
                return items
        if guard.careful:
            guard.leave(progress.checkpoint)  # nothing of the shard in a handler now
    return items
