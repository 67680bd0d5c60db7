"""``failOnDataLoss``: records a streaming query had not read yet, gone from the stream. On the driver.

Kinesis keeps records for the stream's retention period (24 hours to 365 days), then trims them;
a closed shard leaves ListShards once its last record is trimmed. A query stopped for longer than
that, or one that fell further behind, has positions whose records are gone.

What Kinesis answers for a position that retention trimmed (found out for this module):

- GetShardIterator AFTER_SEQUENCE_NUMBER / AT_SEQUENCE_NUMBER with a trimmed sequence number is
  not an error: no exception is documented for it (``TrimmedDataAccessException`` is DynamoDB
  Streams'; Kinesis's InvalidArgumentException is for a sequence number of another shard or
  stream). The iterator starts at the old position and GetRecords answers empty pages, with
  ``MillisBehindLatest`` at about the retention, until it reaches the records still there
  (reported on AWS in harlow/kinesis-consumer#125): the trimmed records are skipped silently, and
  a time-bounded read may see nothing but empty pages for a long time.
- AT_TIMESTAMP older than the trim horizon starts at the oldest record still there (documented),
  like TRIM_HORIZON: not data loss, the query never had those records to read.
- A shard that expired: ListShards leaves it out, GetShardIterator answers ResourceNotFoundException.
- kinesalite filters and deletes records older than the retention in GetRecords (so a trimmed
  position reads on from the oldest record left); moto never trims. Neither can be made to trim
  within a test: the tests answer as AWS does through a relay.

So kinsumer decides, as Druid's Kinesis indexing service does (``isOffsetAvailable``: the shard's
earliest sequence number is at or before the offset): a shard's position ``AFTER:<seq>`` lost data
when the oldest record still in the shard (the first record of a TRIM_HORIZON iterator) comes
after ``<seq>``: the record the query read last was trimmed, so the records after it may have been
too. Kinesis sequence numbers are not contiguous and Kinesis keeps no trace of what it trimmed,
so that is "may have": a shard that got no record for longer than the retention and then got one
counts too (a query stopped that long and restarted). An empty shard loses nothing (there is
nothing to read). A shard the offsets hold that ListShards no longer lists expired before the
query read it to its end: data loss, as AWS's spark-sql-kinesis-connector says (its only check;
the KCL makes none).

When it is checked (each check costs a GetShardIterator and a GetRecords of one record on the
driver): the first time a query run reads a shard from a position made before the run (a restart
from the checkpoint, or a shard idle since), and whenever the last read of a shard ended at least
``_AT_RISK`` of the retention behind the tip of the stream (a backlog about to be trimmed). A
shard that ended at the tip is probed by the driver while the query runs: nothing after it could
be trimmed unseen.

``failOnDataLoss`` true (the default): :class:`~kinsumer.errors.DataLossError`, naming the stream, the
shard and the position, fails the query. False: a WARNING names the shard, the loss is counted in the
progress (``latestOffset``'s ``dataLoss``), and the shard is read from TRIM_HORIZON, the oldest record
still there (an expired shard ends).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..aws.kinesis import ShardInfo
from ..aws.stream_ref import stream_params
from ..errors import DataLossError
from ..reading.polling import PollingReader
from ..reading.position import StartPosition
from .offsets import TRIM_HORIZON, ShardEnd, follows

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["DataLossCheck", "Loss", "at_risk", "expired", "follows", "oldest_record", "trimmed"]

log = logging.getLogger("kinsumer.spark")

#: A shard whose last read ended at least this fraction of the retention behind the tip is checked each batch.
_AT_RISK = 0.9
#: Empty pages a look for a shard's oldest record reads at most (AWS may answer empty pages before records).
_OLDEST_PAGES = 50


def trimmed(position: str, oldest: str | None) -> bool:
    """Records after ``position`` may be lost: the shard's oldest record, ``oldest`` (None: it has none),
    comes after the record the position follows."""
    after = follows(position)
    return after is not None and oldest is not None and int(oldest) > after


def expired(shards: Iterable[str], listing: Iterable[ShardInfo]) -> list[str]:
    """The ``shards`` (held by the offsets, not read to their end) that ListShards no longer lists."""
    listed = {shard.shard_id for shard in listing}
    return sorted(set(shards) - listed)


def at_risk(prior: Mapping[str, ShardEnd], retention_ms: int) -> list[str]:
    """The shards whose last read (``prior``: the ends of the batch before) ended far enough behind the
    tip that the records after them are about to be trimmed."""
    near = _AT_RISK * retention_ms
    return sorted(shard for shard, end in prior.items() if end.behind is not None and end.behind >= near)


def oldest_record(kinesis: KinesisClient, stream: str, shard: str) -> str | None:
    """The sequence number of the oldest record still in ``shard``; None if it has none (or is gone)."""
    reader = PollingReader(kinesis, stream, shard, StartPosition.trim_horizon())
    for _ in range(_OLDEST_PAGES):
        page = reader.next_page(1)
        if page.raw:
            return str(page.raw[0]["SequenceNumber"])
        if page.end_of_shard or page.at_tip:
            return None
    log.info("no record found in %s of %s within %d pages from TRIM_HORIZON", shard, stream, _OLDEST_PAGES)
    return None


@attrs.frozen
class Loss:
    """Records of ``shard`` after ``position`` are gone: ``reason`` "trimmed" (``oldest``: the oldest record
    left) or "expired". ``replay_to``: those of a replayed batch, up to its recorded end, all are."""

    shard: str
    position: str
    reason: str
    oldest: str | None = None
    replay_to: str | None = None  # a replayed batch's recorded end: every record from position to it is gone


class DataLossCheck:
    """The data-loss checks of one query run (one stream reader on the driver), and their count."""

    def __init__(self, kinesis: Callable[[], KinesisClient], stream: str, fail: bool) -> None:
        self._kinesis = kinesis
        self._stream = stream
        self._fail = fail
        self._seen: set[str] = set()  # shards this run has started reading
        self._retention_ms: int | None = None
        self._counted: set[tuple[str, str]] = set()  # (shard, position) of each loss counted
        self._moved: dict[tuple[str, str], str] = {}  # (shard, position) of each start moved past a loss: to where
        self.losses: list[Loss] = []

    def starts(
        self,
        positions: Mapping[str, str],
        listing: Iterable[ShardInfo],
        prior: Mapping[str, ShardEnd],
        replays: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Where a batch reads each of its shards (``positions``: its start positions) from: there, or
        TRIM_HORIZON past a loss (failOnDataLoss false). :class:`DataLossError` on a loss with it true.

        ``prior``: the recorded ends of the batch before (their MillisBehindLatest says which shards
        are at risk). ``replays``: the recorded ends of a batch planned before (a replay after a
        restart). A replay whose recorded end was trimmed too has no record left to read: its start
        is its end (failOnDataLoss false), so it reads nothing, where reading would look for an end
        that is gone.
        """
        replays = replays or {}
        starts = dict(positions)
        gone = expired(positions, listing)
        for shard in gone:
            self._lost(Loss(shard, positions[shard], "expired"))
        risky = set(at_risk(prior, self._retention())) if any(e.behind for e in prior.values()) else set()
        for shard, position in sorted(positions.items()):
            first = shard not in self._seen
            self._seen.add(shard)
            if (shard, position) in self._moved:  # a loss seen before (a replay): the same start again
                starts[shard] = self._moved[(shard, position)]
                continue
            end = replays.get(shard)  # a replay's recorded end, checked when it follows a record past the start
            if end is None or end == position or follows(end) is None:
                end = None
            if (follows(position) is None and end is None) or not (first or shard in risky) or shard in gone:
                continue
            oldest = oldest_record(self._kinesis(), self._stream, shard)
            if end is not None and trimmed(end, oldest):
                self._lost(Loss(shard, position, "trimmed", oldest, replay_to=end))
                starts[shard] = self._moved[(shard, position)] = end
            elif trimmed(position, oldest):
                self._lost(Loss(shard, position, "trimmed", oldest))
                starts[shard] = self._moved[(shard, position)] = TRIM_HORIZON
        return starts

    def progress(self) -> dict[str, Any] | None:
        """The losses counted, for the progress JSON; None if none."""
        if not self.losses:
            return None
        last = self.losses[-1]
        return {
            "expired": sum(1 for loss in self.losses if loss.reason == "expired"),
            "last": attrs.asdict(last, filter=lambda _, value: value is not None),
            "shards": len({loss.shard for loss in self.losses}),
            "trimmed": sum(1 for loss in self.losses if loss.reason == "trimmed"),
        }

    def _lost(self, loss: Loss) -> None:
        if self._fail:
            raise DataLossError(self._stream, loss.shard, loss.position, loss.reason, loss.oldest, loss.replay_to)
        if (loss.shard, loss.position) in self._counted:
            return
        self._counted.add((loss.shard, loss.position))
        if loss.replay_to is not None:  # the next batch starts at its end: the same gap, counted once
            self._counted.add((loss.shard, loss.replay_to))
        self.losses.append(loss)
        if loss.replay_to is not None:
            log.warning(
                "data loss in stream %s: the records of shard %s from %s to %s, of a batch replayed after a restart "
                "(its sink had not committed it), were trimmed by the stream's retention (its oldest record now "
                "is %s); the batch reads nothing of the shard (failOnDataLoss is false)",
                self._stream, loss.shard, loss.position, loss.replay_to, loss.oldest,
            )  # fmt: skip
        elif loss.reason == "expired":
            log.warning(
                "data loss in stream %s: shard %s expired (ListShards no longer lists it) before the query read it "
                "from %s to its end; its records are lost (failOnDataLoss is false)",
                self._stream, loss.shard, loss.position,
            )  # fmt: skip
        else:
            log.warning(
                "data loss in stream %s: the records of shard %s after %s were trimmed by the stream's retention "
                "before the query read them (its oldest record now is %s); reading on from there (failOnDataLoss "
                "is false)",
                self._stream, loss.shard, loss.position, loss.oldest,
            )  # fmt: skip

    def _retention(self) -> int:
        if self._retention_ms is None:
            summary = self._kinesis().describe_stream_summary(**stream_params(self._stream))["StreamDescriptionSummary"]
            self._retention_ms = int(summary["RetentionPeriodHours"]) * 3_600_000
        return self._retention_ms
