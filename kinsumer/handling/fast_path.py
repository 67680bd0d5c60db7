"""``process()`` with one worker (the caller's thread): runs of the queue handed over in place.

A run is a chunk of one shard's records (see :meth:`~kinsumer.delivery.delivery.Delivery.take_run`):
each is handed to the handler and counted processed when it returns, with no lock per record, as
``next()`` does. A handler that raises goes on as :class:`~.attempts.Attempts` says. The records of
a shard under the crash-loop guard's episode go the general way (:class:`~.shard_jobs.ShardJobs`).
"""

from __future__ import annotations

import threading

from ..delivery.delivery import Delivery, ExplicitHolder, age_of
from ..delivery.progress import HANDED, STALE, Run
from ..errors import NoRecordWithin
from .attempts import Attempts, Outcome
from .capture import handling_of
from .guard import ShardGuard
from .options import Handler, RunSpans, no_run_spans
from .shard_jobs import ShardJobs, blocked

__all__ = ["FastPath"]


class FastPath:
    """One worker handling the delivery's runs on the caller's thread (see the module's description)."""

    def __init__(
        self,
        delivery: Delivery,
        handler: Handler,
        attempts: Attempts,
        jobs: ShardJobs,
        stopping: threading.Event,
        runs: RunSpans = no_run_spans,
    ) -> None:
        """``runs(shard_id)``: the context of a run's handling (its span, :meth:`.tracing.Tracing.run`)."""
        self._runs = runs
        self._delivery = delivery
        self._handler = handler
        self._attempts = attempts
        self._jobs = jobs
        self._stopping = stopping
        self._holder = ExplicitHolder()  # run_ready()'s, and the run it keeps until its lease is confirmed
        self._kept: Run | None = None

    def work(self) -> None:
        """Handle runs until the consumer stops."""
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
                self._run(run, None)
            finally:
                delivery.end_run(holder)
            del run  # a capture given up meanwhile is not kept alive while the next run is awaited

    def run_ready(self, most: int) -> int | None:
        """Handle the runs that are ready now, without waiting, until ``most`` records were handed to the
        handler (a run is handled whole); how many were; None once the delivery closed. For a driver that
        runs everything on one thread (the simulator, tests/sim): a run whose lease must be confirmed first is
        kept for the next call."""
        delivery, holder, handed = self._delivery, self._holder, 0
        while handed < most:
            run, self._kept = self._kept, None
            if run is None:
                try:
                    run = delivery.take_run(holder, 0.0)
                except NoRecordWithin:
                    break
                if run is None:
                    return None
            start, waiting = run.handed, False
            try:
                waiting = self._run(run, 0.0)
            finally:
                if waiting:
                    self._kept = run
                else:
                    delivery.end_run(holder)
            handed += run.handed - start
            if waiting:
                break
        return handed

    def _run(self, run: Run, lease_wait: float | None) -> bool:
        """Handle the run; True if it stopped at a record whose lease was not confirmed within ``lease_wait``
        seconds (None: no limit), to go on later."""
        progress = run.progress
        guard = self._jobs.begun(progress)
        if guard is None or blocked(progress):
            return False  # not handed over: the run's end gives them back
        if guard.careful:
            self._the_general_way(run, run.handed)
            return False
        with self._runs(progress.shard_id):
            return self._hand(run, guard, lease_wait)

    def _hand(self, run: Run, guard: ShardGuard, lease_wait: float | None) -> bool:
        """Hand the run's records to the handler, in order, until it ends or must stop (True: to wait for the
        lease, as :meth:`_run` says); a receiver that takes runs (``records_delivered``, ``records_handled``) is
        told as it ends."""
        progress, records, base = run.progress, run.records, run.base
        hand, handler, delivery = guard.hand, self._handler, self._delivery
        monotonic = delivery.monotonic  # the clock of the lease's fresh_until
        calls, shard_id, attempts = handling_of(progress).calls, progress.shard_id, self._attempts
        expired = attempts.expired if attempts.max_age is not None else None
        stats, delivered, handled = attempts.stats, attempts.wants_deliveries, attempts.wants_handled
        delivered_in_run, handled_in_run = attempts.deliveries_per_run, attempts.handled_per_run
        handed = done = 0  # for a receiver of runs: records handed over and done, the first's latency, the time
        first_latency = spent = 0.0
        try:
            for i in range(run.handed, run.end):  # a run set aside at a pause goes on where it stopped
                offered = run.offer(i, monotonic(), hand)
                if offered is STALE:  # the lease must be confirmed first
                    if not delivery.wait_for_lease(progress, lease_wait):
                        return not delivery.closed
                    offered = run.offer(i, monotonic(), hand)
                if offered is not HANDED:
                    return False  # given up (the rest is not handed over), paused (the rest waits), the guard's limit
                record = records[i]
                if delivered:  # as next() counts it
                    if delivered_in_run:
                        if not handed:  # the run's first is its oldest: its latency, as it is handed over
                            first_latency = age_of(record.approximate_arrival_timestamp)
                        handed += 1
                    else:
                        stats.record_delivered(shard_id, age_of(record.approximate_arrival_timestamp))
                try:
                    if expired is not None and expired(record, progress):
                        outcome: Outcome = "done"  # it went to the sink
                    else:
                        started = calls[id(record)] = monotonic()
                        try:
                            handler(record)
                            outcome = "done"
                            if handled:
                                if handled_in_run:
                                    done += 1
                                    spent += monotonic() - started
                                else:
                                    stats.record_handled(shard_id, monotonic() - started)
                        except Exception as exc:  # noqa: BLE001 - the first failure: tried again, then the sink
                            del calls[id(record)]
                            outcome = self._attempts.after_first(record, progress, exc)
                        else:
                            del calls[id(record)]
                except BaseException:
                    calls.pop(id(record), None)
                    progress.retract(base + i)  # not done: given back, not waited for
                    raise
                if outcome == "left":
                    progress.retract(base + i)
                    return False
                run.processed = i + 1  # counted when the shard folds the run in (its checkpoint is read)
                if delivery.closed:  # a stop ended the run meanwhile: count it on its own
                    progress.ack(base + i)
                if guard.careful:  # an episode cannot begin during a run, but be safe
                    self._the_general_way(run, i + 1)
                    return False
            return False
        finally:
            if handed:
                stats.records_delivered(shard_id, handed, first_latency)
            if done:
                stats.records_handled(shard_id, done, spent / done)

    def _the_general_way(self, run: Run, start: int) -> None:
        """The run's records from ``start`` on go the general way, which acknowledges or gives back each."""
        run.handed = run.end
        progress, base = run.progress, run.base
        if start < run.end:
            self._jobs.run(progress.shard_id, [(run.records[i], progress, base + i) for i in range(start, run.end)])
