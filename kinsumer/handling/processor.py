"""``Kinsumer.process()`` and ``process_batches()``: handlers called for every record, retried, dead-lettered.

Workers (``concurrency`` of them; with one, the caller's own thread) take records from the
delivery in shard order, one taker at a time, and hand them to the handler through the
:class:`~.scheduler.Scheduler`: never two records (or batches) of one shard at once, each shard
in order. A record is acknowledged when its handler returns (the shard's checkpoint advances
over the contiguous prefix of acknowledged records), or once it was handed to the dead-letter
sink. A handler that raises is called again with exponential backoff; later records of its
shard wait. After ``max_attempts`` calls the record goes to the sink; without one,
:class:`~kinsumer.RecordFailed` is raised and the record stays unacknowledged.

Batches (``process_batches``): up to ``max_records`` consecutive records of one shard,
gathered for up to ``max_wait`` s. The handler returns None (all done) or the records that
failed: the batch is done up to the first of them, and the rest goes again. A batch whose
handler raises is split in halves until the failing records are alone; only those count
attempts.

The crash-loop guard (:mod:`.guard`): each record goes to a handler only within its shard's
reservation; during an episode, records go one marker at a time, alone in the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs

from ..delivery.delivery import Delivery, ExplicitHolder
from ..delivery.progress import Run, ShardProgress
from ..errors import ConfigError, KinsumerError, NoRecordWithin, RecordFailed
from ..reading.position import Position
from ..record import Record
from ..stats import StatReceiver
from ..waiting import WAKE
from .failure import Failure, describe
from .guard import ShardGuard
from .scheduler import Scheduler

__all__ = ["Options", "Processor"]

log = logging.getLogger("kinsumer.process")

Handler = Callable[[Record], Any]
BatchHandler = Callable[[list[Record]], Any]
Sink = Callable[[Failure], Any]
Taken = tuple[Record, ShardProgress, int]
Outcome = Literal["done", "left"]  # done: acknowledge it; left: not handled here (the shard's next owner will)


def _positive(name: str, minimum: float, *, whole: bool = False) -> Callable[[Any, Any, Any], None]:
    def check(instance: Any, attribute: Any, value: object) -> None:
        kind = int if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
            rule = f"must be {'a whole number' if whole else 'a number'} >= {minimum:g}"
            raise ConfigError(name, rule, value)

    return check


@attrs.frozen
class Options:
    """How ``process()`` handles records (its keyword arguments), checked."""

    max_attempts: int = attrs.field(default=3, validator=_positive("max_attempts", 1, whole=True))
    backoff: float = attrs.field(default=0.5, validator=_positive("backoff", 0))
    max_backoff: float = attrs.field(default=30.0, validator=_positive("max_backoff", 0))
    dead_letter: Sink | None = None
    concurrency: int = attrs.field(default=1, validator=_positive("concurrency", 1, whole=True))
    max_records: int = attrs.field(default=1, validator=_positive("max_records", 1, whole=True))
    max_wait: float = attrs.field(default=0.0, validator=_positive("max_wait", 0))

    def __attrs_post_init__(self) -> None:
        if self.dead_letter is not None and not callable(self.dead_letter):
            raise ConfigError("dead_letter", "must be a callable taking a kinsumer.Failure (or None)", self.dead_letter)
        if self.max_backoff < self.backoff:
            raise ConfigError("max_backoff", f"must be >= backoff ({self.backoff:g} s)", self.max_backoff)

    def delay(self, attempt: int) -> float:
        """Seconds before call ``attempt + 1``: ``backoff`` doubled each time, at most ``max_backoff``."""
        return float(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))


@attrs.frozen
class Origin:
    """Where failed records come from, for their :class:`Failure`."""

    stream: str
    application: str
    client_id: str

    def of(self, record: Record) -> tuple[str, str, str]:
        """The failure's ``stream``, ``application`` and ``client_id`` fields for ``record``."""
        return record.stream or self.stream, self.application, self.client_id


class _Stopping(Exception):
    """A wait ended: the consumer stops, or the shard is being given up."""


class Processor:
    """Runs one call of ``process()`` / ``process_batches()`` (see the module's description)."""

    def __init__(
        self,
        delivery: Delivery,
        handler: Handler | BatchHandler,
        options: Options,
        origin: Origin,
        stats: StatReceiver,
        *,
        batches: bool = False,
        buffer_size: int = 1000,
    ) -> None:
        self._delivery = delivery
        self._handler = handler
        self._options = options
        self._origin = origin
        self._stats = stats
        self._batches = batches
        self._scheduler: Scheduler[Taken] = Scheduler(buffer_size)
        self._take_lock = threading.Lock()
        self._failed: BaseException | None = None  # the first error of a worker: every worker ends, run() raises it
        self._stopping = threading.Event()
        self._local = threading.local()  # .current: the records of a worker's job not done yet

    # ----------------------------------------------------------------- running

    def run(self) -> None:
        """Handle records until the consumer stops; raise what a worker could not handle."""
        workers = self._options.concurrency
        try:
            if workers == 1 and not self._batches:
                self._work_alone()
            elif workers == 1:
                self._work()
            else:
                threads = [
                    threading.Thread(target=self._work_guarded, name=f"kinsumer-process-{i}", daemon=True)
                    for i in range(workers)
                ]
                for thread in threads:
                    thread.start()
                try:
                    for thread in threads:
                        while thread.is_alive():
                            thread.join(WAKE)  # the caller's thread stays interruptible (Ctrl-C)
                finally:
                    self._stopping.set()
                    self._scheduler.wake()
                    for thread in threads:
                        thread.join(WAKE)
        finally:
            self._give_back(self._scheduler.drain())  # never handed to a handler
        if self._failed is not None:
            raise self._failed

    def _work_guarded(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread by run()
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc
        self._stopping.set()
        self._scheduler.wake()

    def _work(self) -> None:
        while not self._stopping.is_set():
            job = self._next_job()
            if job is None:
                return
            shard, items = job
            try:
                self._run_job(items)
            except BaseException:
                self._stopping.set()
                raise
            finally:
                self._scheduler.release(shard)
            del job, items  # a capture given up meanwhile is not kept alive while the next job is awaited

    def _work_alone(self) -> None:
        """One worker (the caller's thread), one record at a time: runs of the queue handed over in place.

        A run is a chunk of one shard's records (see :meth:`Delivery.take_run`): each is handed to
        the handler and counted processed when it returns, with no lock per record, as ``next()``
        does. A run of a shard under the crash-loop guard's episode goes the general way.
        """
        holder = ExplicitHolder()
        delivery = self._delivery
        while not self._stopping.is_set():
            try:
                run = delivery.take_run(holder, None)
            except NoRecordWithin:
                continue
            if run is None:
                return
            try:
                self._run_alone(run)
            finally:
                delivery.end_run(holder)
            del run  # as in _work

    def _run_alone(self, run: Run) -> None:
        progress, records, base = run.progress, run.records, run.base
        guard = self._guard(progress)
        if guard is None or progress.failed:
            return  # not handed over: the run's end gives them back
        if guard.careful:
            run.handed = run.end  # all handed to the general way, which acknowledges or gives back each
            self._run_job([(records[i], progress, base + i) for i in range(run.end)])
            return
        hand, handler, delivery, monotonic = guard.hand, self._handler, self._delivery, time.monotonic
        for i in range(run.end):
            if progress.revoked:
                return  # the shard is being given up: the rest is not handed over
            if progress.fresh_until <= monotonic() and not delivery.wait_for_lease(progress):
                return
            record = records[i]
            if not hand((record.sequence_number, record.sub_sequence_number)):
                return
            run.handed = i + 1
            try:
                try:
                    handler(record)  # type: ignore[arg-type]
                    outcome: Outcome = "done"
                except Exception as exc:  # noqa: BLE001 - the first failure: tried again, then the sink
                    outcome = self._after_failure(record, progress, exc)
            except BaseException:
                progress.retract(base + i)  # not done: given back, not waited for
                raise
            if outcome == "left":
                progress.retract(base + i)
                return
            run.processed = i + 1  # counted when the shard folds the run in (its checkpoint is read)
            if delivery.closed:  # a stop ended the run meanwhile: count it on its own
                progress.ack(base + i)
            if guard.careful:  # cannot start in a run, but be safe: the rest the general way
                run.handed = run.end
                self._run_job([(records[j], progress, base + j) for j in range(i + 1, run.end)])
                return

    def _next_job(self) -> tuple[str, list[Taken]] | None:
        """A shard this worker now has to itself, with records of it in order; None once stopping.

        One worker at a time takes records from the delivery: one it can have at once it keeps,
        others it parks for whoever is free; the other workers wait for parked records.
        """
        most = self._options.max_records
        while not self._stopping.is_set():
            claimed = self._scheduler.claim(most)
            if claimed is not None:
                return claimed
            if not self._take_lock.acquire(blocking=False):
                claimed = self._scheduler.claim(most, WAKE)
                if claimed is not None:
                    return claimed
                continue
            try:
                taken = self._take()
                if taken is None:
                    continue
                shard = taken[1].shard_id  # the capture's key: shard IDs repeat across streams
                if self._blocked(taken[1]):
                    self._give_back([taken])
                    continue
                if self._scheduler.claim_now(shard, taken):
                    return shard, [taken]
                self._scheduler.put(shard, taken)
            finally:
                self._take_lock.release()
        return None

    def _take(self, timeout: float = WAKE) -> Taken | None:
        """The delivery's next record (as the one taker); None if none came in ``timeout`` s (or at a stop)."""
        if not self._scheduler.room(timeout):
            return None
        try:
            taken = self._delivery.take(timeout)
        except NoRecordWithin:
            return None
        if taken is None:  # the consumer stopped
            self._stopping.set()
            self._scheduler.wake()
        return taken

    # ----------------------------------------------------------------- one shard's records

    def _run_job(self, items: list[Taken]) -> None:
        """Handle ``items`` (records of one shard, in order) and the records of it that come meanwhile.

        Whatever ends it by raising (RecordFailed, a fatal error, Ctrl-C) leaves the records not done
        unacknowledged and gives them back; after RecordFailed nothing more of that capture of the
        shard is handled in this process (its next owner tries the record again).
        """
        local = self._local
        local.current = items
        try:
            self._run_shard(items)
        except RecordFailed as failed:
            for record, progress, _ in local.current:
                if record is failed.failure.record:
                    progress.failed = True
            raise
        finally:
            self._give_back(local.current)
            local.current = []

    def _run_shard(self, items: list[Taken]) -> None:
        """See :meth:`_run_job`; ``self._local.current`` holds the records not done yet."""
        local = self._local
        shard = items[0][1].shard_id
        while items:
            progress = items[0][1]
            run = [taken for taken in items if taken[1] is progress]  # one capture's records (a shard may be
            rest = [taken for taken in items if taken[1] is not progress]  # given up and taken again meanwhile)
            guard = self._guard(progress)
            if progress.revoked or guard is None or self._blocked(progress):  # its next owner delivers them
                self._give_back(run)
                items = local.current = rest
            else:
                left = self._careful(run, guard) if guard.careful else run
                while left and not guard.careful:
                    if self._batches:
                        left = self._gather(shard, left)
                        local.current = left + rest
                    done = self._settle(left, guard)
                    left = left[done:]
                    local.current = left + rest
                    if done == 0 or progress.revoked or self._stopping.is_set():
                        break
                if left:  # the consumer stops, or the shard is being given up: the rest is given back
                    return
                items = local.current = rest
            if not items and not self._stopping.is_set():
                items = local.current = self._scheduler.more(shard, self._options.max_records)

    def _guard(self, progress: ShardProgress) -> ShardGuard | None:
        """The shard's crash-loop guard, begun; None if the shard is not ours any more."""
        guard = progress.guard
        if guard is None:  # a capture made without one (tests that build deliveries by hand)
            return _UNGUARDED
        if not guard.began and not guard.begin(self._options.max_attempts):
            return None
        return guard

    @staticmethod
    def _blocked(progress: ShardProgress) -> bool:
        return progress.failed

    @staticmethod
    def _give_back(items: Sequence[Taken]) -> None:
        """Records taken but not handled here: their shard's next owner delivers them."""
        for _, progress, token in items:
            progress.retract(token)

    # ----------------------------------------------------------------- normal mode

    def _settle(self, items: list[Taken], guard: ShardGuard) -> int:
        """Hand ``items`` out (one record, or a batch) until each is done; how many are (fewer only on a stop)."""
        for record, _, _ in items:
            if not guard.hand(_position(record)):
                return 0
        if not self._batches:
            record, progress, token = items[0]
            if self._attempts(record, progress) == "left":
                return 0
            progress.ack(token)
            return 1
        return self._batch(items, 0, len(items), {})

    def _batch(self, items: list[Taken], low: int, high: int, attempts: dict[int, int]) -> int:
        """Handle ``items[low:high]`` as a batch until every record is done (partial failures retried from
        the first failed one, a raising batch split in halves); how many from ``low`` are done."""
        at = low
        while at < high:
            records = [record for record, _, _ in items[at:high]]
            try:
                with self._scheduler.section():
                    result = self._handler(records)  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001 - split, or counted against the record alone
                self._stats.handler_failed(items[at][1].shard_id, type(exc).__name__)
                if len(records) > 1:  # halves, until the failing records are alone
                    middle = at + len(records) // 2
                    done = self._batch(items, at, middle, attempts)
                    if done < middle - at:
                        return at - low + done
                    at = middle
                    continue
                failed, error = 0, describe(exc)
            else:
                first = _first_failed(result, records)
                if first is None:
                    self._ack(items, at, high)
                    return high - low
                self._ack(items, at, at + first)  # done up to the first failed one; the rest goes again
                at += first
                failed, error = 0, "the batch handler returned it as failed"
                self._stats.handler_failed(items[at][1].shard_id, "ReportedFailed")
            outcome = self._failed_once(items[at], attempts, at + failed, error)
            if outcome == "left":
                return at - low
            if outcome == "done":
                self._ack(items, at, at + 1)
                at += 1
        return high - low

    def _failed_once(self, taken: Taken, attempts: dict[int, int], index: int, error: str) -> Outcome | None:
        """A record failed alone: counted, then paused before its next try (None), or done once it went to
        the sink, or "left" on a stop."""
        record, progress, _ = taken
        count = attempts.get(index, 0) + 1
        attempts[index] = count
        if count >= self._options.max_attempts:
            self._retried(progress, count)
            self._exhausted(Failure(record, count, "raised", error, *self._origin.of(record)), progress)
            return "done"
        return None if self._retry_later(record, progress, count, error) else "left"

    @staticmethod
    def _ack(items: list[Taken], low: int, high: int) -> None:
        for _, progress, token in items[low:high]:
            progress.ack(token)

    def _gather(self, shard: str, items: list[Taken]) -> list[Taken]:
        """Up to ``max_records`` records of the shard's capture, waiting up to ``max_wait`` s for more to come."""
        most, progress = self._options.max_records, items[0][1]
        deadline = time.monotonic() + self._options.max_wait
        while True:
            if len(items) < most:
                more = self._scheduler.more(shard, most - len(items))
                same = [taken for taken in more if taken[1] is progress]
                items = items + same
                if len(same) < len(more):  # a later capture of the shard: its records wait for the next job
                    self._scheduler.put_back(shard, more[len(same) :])
                    return items
            left = deadline - time.monotonic()
            if len(items) >= most or left <= 0 or self._stopping.is_set() or progress.revoked:
                return items
            if self._take_lock.acquire(timeout=min(WAKE, left)):
                try:
                    taken = self._take(min(WAKE, left))
                finally:
                    self._take_lock.release()
                if taken is not None:
                    self._scheduler.put(taken[1].shard_id, taken)  # this shard's too: behind what is parked

    # ----------------------------------------------------------------- careful mode

    def _careful(self, items: list[Taken], guard: ShardGuard) -> list[Taken]:
        """Records of a shard in a crash-loop episode: each marker stored before its records go to a
        handler, alone in the process. Returns the records not done: for normal mode once the episode
        is over, else (a stop, the shard given up) to give back."""
        local = self._local
        with self._scheduler.section(exclusive=True):
            progress = items[0][1]
            while items and guard.careful:
                record, progress, token = items[0]
                following = [_position(r) for r, _, _ in items[1:]]
                action, episode = guard.plan(_position(record), following)
                if action == "dead-letter":
                    deaths = guard.deaths(_position(record))
                    why = f"{deaths} processes died while it was in their handler"
                    self._exhausted(Failure(record, deaths, "crashed", why, *self._origin.of(record)), progress)
                else:
                    if action == "mark" and (episode is None or not guard.mark(episode, progress.checkpoint)):
                        return items
                    if self._attempts(record, progress, exclusive=True) == "left":
                        return items
                progress.ack(token)
                items = items[1:]
                local.current = items + [t for t in local.current if t[1] is not progress]
                if not guard.finish(_position(record), progress.checkpoint):
                    return items
            if guard.careful:
                guard.leave(progress.checkpoint)  # nothing of the shard in a handler now
        return items

    # ----------------------------------------------------------------- one record

    def _attempts(self, record: Record, progress: ShardProgress, *, exclusive: bool = False, first: int = 1) -> Outcome:
        """Call the handler (with ``[record]`` for a batch handler) until it returns, or the record goes to the sink
        (``first``: the number of this call)."""
        attempt = first - 1
        while True:
            attempt += 1
            try:
                if exclusive:
                    self._call(record)
                else:
                    with self._scheduler.section():
                        self._call(record)
            except Exception as exc:  # noqa: BLE001 - the handler's failure: tried again, then the sink
                error = exc
            else:
                self._retried(progress, attempt)
                return "done"
            self._stats.handler_failed(progress.shard_id, type(error).__name__)
            if attempt >= self._options.max_attempts:
                self._retried(progress, attempt)
                failure = Failure(record, attempt, "raised", describe(error), *self._origin.of(record))
                self._exhausted(failure, progress)
                return "done"
            if not self._retry_later(record, progress, attempt, type(error).__name__):
                return "left"

    @staticmethod
    def _retried(progress: ShardProgress, attempts: int) -> None:
        """A record is done after ``attempts`` calls: if it was retried, the note of it goes."""
        progress.retrying = None
        if attempts > 1 and progress.guard is not None:
            progress.guard.note_retrying(None)

    def _after_failure(self, record: Record, progress: ShardProgress, error: Exception) -> Outcome:
        """The handler's first call on ``record`` raised ``error``: go on as :meth:`_attempts` does."""
        self._stats.handler_failed(progress.shard_id, type(error).__name__)
        if self._options.max_attempts <= 1:
            failure = Failure(record, 1, "raised", describe(error), *self._origin.of(record))
            self._exhausted(failure, progress)
            return "done"
        if not self._retry_later(record, progress, 1, type(error).__name__):
            return "left"
        return self._attempts(record, progress, exclusive=True, first=2)

    def _call(self, record: Record) -> None:
        if not self._batches:
            self._handler(record)  # type: ignore[arg-type]
            return
        result = self._handler([record])  # type: ignore[arg-type]
        if _first_failed(result, [record]) is not None:
            raise _ReportedFailed("the batch handler returned it as failed")

    def _retry_later(self, record: Record, progress: ShardProgress, attempt: int, error: str = "") -> bool:
        """Count a failed call and wait before the next; False if the consumer stops or the shard goes."""
        progress.retrying = attempt
        if progress.guard is not None:
            progress.guard.note_retrying(attempt, error)
        self._stats.handler_retried(progress.shard_id)
        delay = self._options.delay(attempt)
        log.info("a record of %s failed (attempt %d of %d); trying again in %.2g s",
                 progress.shard_id, attempt, self._options.max_attempts, delay)  # fmt: skip
        if self._pause(delay, progress):
            return True
        progress.retrying = None
        return False

    def _pause(self, seconds: float, progress: ShardProgress) -> bool:
        """Wait before trying again; False if the consumer stops or the shard is being given up."""
        deadline = time.monotonic() + seconds
        while True:
            if self._stopping.is_set() or self._delivery.closed or progress.revoked:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            self._stopping.wait(min(WAKE, left))

    def _exhausted(self, failure: Failure, progress: ShardProgress) -> None:
        """A record failed for good: to the sink (tried again like a handler), else RecordFailed."""
        sink = self._options.dead_letter
        if sink is None:
            raise RecordFailed(failure)
        attempt = 0
        while True:
            attempt += 1
            try:
                sink(failure)
            except Exception as exc:
                if attempt >= self._options.max_attempts or not self._pause(self._options.delay(attempt), progress):
                    raise RecordFailed(failure, describe(exc)) from exc
                continue
            self._stats.dead_lettered(progress.shard_id, failure.reason)
            log.warning("a record of %s went to the dead-letter sink (%s after %d attempts): %s",
                        progress.shard_id, failure.reason, failure.attempts, failure.error)  # fmt: skip
            return


class _ReportedFailed(Exception):
    """A batch handler returned a record (handled alone) as failed."""


def _first_failed(result: object, records: list[Record]) -> int | None:
    """None if the batch handler's result says every record is done; else the index of the first failed one."""
    if result is None:
        return None
    if not isinstance(result, list | tuple | set | frozenset):
        raise KinsumerError(f"a batch handler must return None or the records that failed, not {type(result).__name__}")
    if not result:
        return None
    failed = {id(record) for record in result}
    for i, record in enumerate(records):
        if id(record) in failed:
            return i
    raise KinsumerError("the batch handler returned records that were not in its batch")


def _position(record: Record) -> Position:
    return record.sequence_number, record.sub_sequence_number


class _Unguarded(ShardGuard):
    """No crash-loop guard: every record in normal mode, nothing stored."""

    def note_retrying(self, attempts: int | None, error: str = "") -> None:
        pass

    def __init__(self) -> None:
        pass

    @property
    def careful(self) -> bool:
        return False

    @property
    def began(self) -> bool:
        return True

    def begin(self, max_attempts: int) -> bool:
        return True

    def hand(self, position: Position) -> bool:
        return True


_UNGUARDED = _Unguarded()
