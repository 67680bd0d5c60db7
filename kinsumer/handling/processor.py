"""``Kinsumer.process()`` and ``process_batches()``: handlers called for every record, retried, dead-lettered.

Workers (``concurrency`` of them; with one, the caller's own thread) take records from the
delivery in shard order, one taker at a time, and hand them to the handler through the
:class:`~.scheduler.Scheduler`: never two records (or batches) of one shard at once, each shard
in order; with ``ordering="key"``, never two of one partition key (or group of keys), each key in
order. A record is acknowledged when its handler returns (the shard's checkpoint advances
over the contiguous prefix of acknowledged records), or once it was handed to the dead-letter
sink. The parts, each a module of ``handling/``:

- here: the worker threads, and taking records from the delivery for them;
- :mod:`.shard_jobs`: a worker's job, one lane's records in order, through its shard's crash-loop guard;
- :mod:`.fast_path`: one worker, one record at a time, on the caller's thread;
- :mod:`.batches`: gathering batches, partial failures and bisection (``process_batches``);
- :mod:`.careful_mode`: a shard during a crash-loop episode, one marker at a time, alone;
- :mod:`.attempts`: the attempt rule (retries, backoff, the sink or ``RecordFailed``), in one place;
- :mod:`.tracing`: each handler call in an OpenTelemetry span, when OpenTelemetry is importable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

from ..delivery.delivery import Delivery, Taken
from ..delivery.progress import ShardProgress
from ..errors import NoRecordWithin
from ..record import Record
from ..stats import StatReceiver
from ..waiting import WAKE
from .attempts import Attempts
from .batches import Batches, one_record
from .decoding import decoding, decoding_batches
from .fast_path import FastPath
from .hooks import Lifecycle
from .options import BatchHandler, Handler, Options, Origin, no_run_spans
from .scheduler import Scheduler
from .shard_jobs import ShardJobs, blocked, by_key, by_key_group, give_back, in_shard_order, paused
from .timeouts import TimedHandler, shard_of_batch, shard_of_record
from .tracing import Tracing

__all__ = ["Options", "Origin", "Processor"]


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
        tracing: Tracing | None = None,
    ) -> None:
        """``tracing``: each handler call in a span (:mod:`.tracing`); None: none (OpenTelemetry not importable)."""
        self._delivery = delivery
        self._options = options
        self._by_key = options.ordering == "key" and options.concurrency > 1
        key_of = (by_key_group(options.concurrency) if batches else by_key) if self._by_key else None
        self._scheduler: Scheduler[Taken] = Scheduler(buffer_size, key_of, held=paused)
        self._take_lock = threading.Lock()
        self._failed: BaseException | None = None  # the first error of a worker: every worker ends, run() raises it
        self._stopping = threading.Event()  # process() ends: the consumer stops, or a worker failed
        self._failing = threading.Event()  # ... because a worker failed (or the caller's thread was interrupted)
        self._timed: TimedHandler | None = None
        if options.decode is not None and batches:  # handler([(value, record), ...]): decoded on the worker's thread
            handler = decoding_batches(cast(Callable[[list[tuple[Any, Record]]], object], handler), options.decode)
        elif options.decode is not None:  # handler(value, record)
            handler = decoding(cast(Callable[[Any, Record], object], handler), options.decode)
        if options.timeout is not None:  # each worker calls the handler on a thread of its own
            shard_of = shard_of_batch if batches else shard_of_record
            handler = self._timed = TimedHandler(handler, options.timeout, options.max_stuck, shard_of)
        single = one_record(cast(BatchHandler, handler)) if batches else cast(Handler, handler)
        # the span goes around the timeout's wait (the call runs in the worker's context, on its caller thread)
        traced = None
        if tracing is not None:
            traced = tracing.batch(cast(BatchHandler, handler)) if batches else tracing.single(cast(Handler, handler))
        traced_one = None if traced is None else (one_record(traced) if batches else traced)
        # by key, a record's wait for its next call ends only when its shard is released: later ones may be done
        woken, cut_short = (self._failing, self._released) if self._by_key else (self._stopping, self._given_up)
        attempts = Attempts(
            options, origin, stats, single, self._scheduler.section, woken, cut_short,
            None if tracing is None or traced_one is None else (traced_one, tracing.failed_span),
        )  # fmt: skip
        gathered = (
            Batches(
                cast(BatchHandler, handler), attempts, self._scheduler, stats, self._take, self._park, self._take_lock,
                self._stopping, max_records=options.max_records, max_wait=options.max_wait,
                traced=traced if batches else None,
            )
            if batches
            else None
        )  # fmt: skip
        hooks = (options.on_assigned, options.on_revoked, options.on_lost)
        lifecycle = Lifecycle(*hooks, stats) if any(hook is not None for hook in hooks) else None
        delivery.lifecycle = lifecycle  # the shard workers call revoked and lost at handoffs
        runs = tracing.run if tracing is not None and not batches else no_run_spans  # a batch call has its span
        self._jobs = ShardJobs(
            options, origin, attempts, self._scheduler, self._stopping, gathered, lifecycle,
            failing=self._failing if self._by_key else None, runs=runs,
        )  # fmt: skip
        self._alone = (
            FastPath(delivery, single if traced is None else traced, attempts, self._jobs, self._stopping, runs)
            if options.concurrency == 1 and not batches
            else None
        )

    def stuck_calls(self) -> list[tuple[str, float]]:
        """The handler calls past ``timeout`` still running (a sync call goes on in the background):
        (shard, seconds since the call began), oldest first; none without a ``timeout``."""
        return self._timed.stuck() if self._timed is not None else []

    def run_ready(self, most: int) -> int | None:
        """With one worker and a handler of records: handle what is ready now, without waiting, on the
        caller's thread (see :meth:`.fast_path.FastPath.run_ready`: the simulator's step)."""
        if self._alone is None:
            raise ValueError("run_ready(): process() with one worker only (concurrency=1, not batches)")
        return self._alone.run_ready(most)

    def run(self) -> None:
        """Handle records until the consumer stops; raise what a worker could not handle."""
        workers = self._options.concurrency
        try:
            if self._alone is not None:
                self._alone.work()
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
                except BaseException:
                    self._failing.set()
                    raise
                finally:
                    self._stopping.set()
                    self._scheduler.wake()
                    for thread in threads:
                        thread.join(WAKE)
        finally:
            give_back(self._scheduler.drain())  # never handed to a handler
            if self._timed is not None:
                self._timed.close()
        if self._failed is not None:
            raise self._failed

    def _given_up(self, progress: ShardProgress) -> bool:
        """A wait between calls on a record of ``progress`` ends (ordering by shard): process() ends, the
        consumer stops, or the shard is being given up."""
        return self._stopping.is_set() or self._delivery.closed or progress.phase.revoked

    def _released(self, progress: ShardProgress) -> bool:
        """The same by key: process() failed, or the shard was released (its handoff over)."""
        return self._failing.is_set() or progress.released

    def _work_guarded(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread by run()
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc
        self._failing.set()
        self._stopping.set()
        self._scheduler.wake()

    def _work(self) -> None:
        serial = in_shard_order if self._by_key else None
        while True:
            job = self._next_job() or self._last_jobs()
            if job is None:
                return
            lane, items = job
            try:
                self._jobs.run(lane, items)
            except BaseException:
                self._failing.set()
                self._stopping.set()
                raise
            finally:
                self._scheduler.release(lane, serial)
            del job, items  # a capture given up meanwhile is not kept alive while the next job is awaited

    def _next_job(self) -> tuple[str, list[Taken]] | None:
        """A lane (a shard, or a key of one) this worker now has to itself, with records of it in order;
        None once stopping.

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
                lane = self._lane(taken)
                if lane is None:
                    continue
                if self._scheduler.claim_now(lane, taken):
                    return lane, [taken]
                self._scheduler.put(lane, taken)
            finally:
                self._take_lock.release()
        return None

    def _last_jobs(self) -> tuple[str, list[Taken]] | None:
        """After a clean stop, with ordering by key: a lane with records parked, for its records before one
        handed out (the checkpoint cannot pass them, so the handoff waits for them); None once none is
        left, or with ordering by shard. Those of a paused shard too: a clean stop repeats nothing."""
        while self._by_key and not self._failing.is_set():
            claimed = self._scheduler.claim(self._options.max_records, WAKE, held_too=True)
            if claimed is not None:
                return claimed
            if self._scheduler.idle:
                return None
        return None

    def _lane(self, taken: Taken) -> str | None:
        """The lane of a record just taken (by the taker); None if it was given back (not handled here).

        With ordering by key, the record's capture begins here, before any of its records is parked:
        whether they go in shard order (the crash-loop guard's careful mode) decides their lane.
        """
        progress = taken[1]
        shard = progress.shard_id  # the capture's key: shard IDs repeat across streams
        if blocked(progress):
            give_back([taken])
            return None
        if not self._by_key:
            return shard
        if progress.phase.revoked or self._jobs.begun(progress) is None:
            give_back([taken])
            return None
        return self._scheduler.lane(shard, taken, in_shard_order(taken))

    def _park(self, taken: Taken) -> None:
        """Park a record taken while gathering a batch (behind what is parked of its lane)."""
        lane = self._lane(taken)
        if lane is not None:
            self._scheduler.put(lane, taken)

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
