"""Reading a shard with enhanced fan-out: SubscribeToShard, event after event.

The second implementation of the reading seam (:mod:`.reader`). A subscription pushes events
(records, the continuation sequence number, how far the tip is ahead) for up to 5 minutes; a
*pump* per reader keeps one open and hands each event on as a :class:`~.reader.Page` through a
queue of one, so the subscription is read no faster than the shard's worker takes pages (the
connection's buffer fills, and TCP holds the server back), and a stop never waits on the
network: :meth:`SubscriptionReader.next_page` wakes every :data:`~kinsumer.waiting.WAKE` seconds,
and :meth:`~SubscriptionReader.close` ends the pump and its connection.

The pumps are coroutines on the process's one fan-out thread (:mod:`.fanout_hub`), not a thread
each; their few blocking calls (GetShardIterator, the GetRecords checks below) run on its small
pool. Where kinsumer may send SubscribeToShard itself (:mod:`~kinsumer.aws.subscription_http`:
a client without a hook of its own on it, a Stubber or a proxy), the event stream is read on
that thread's event loop, and the threads do not grow with the shards. Elsewhere botocore makes
the call and its answer is read with blocking reads, on a thread the reader keeps for it: a
thread per subscription, there only.

An event that holds only user records a start inside a KPL aggregate covers is not handed on
(an empty page would look like the tip of the shard). The pump renews a subscription that
ended after the last record it handed on (at its start while it handed none on), and
subscribes again after connection errors, throttling (LimitExceeded: one subscription a
second per consumer and shard) and ResourceInUse (the previous subscription to the shard,
ours or a former owner's, is still open), with backoff. A closed shard ends with an event
that names its children.

Some servers (kinesis-mock) never send that last event on a closed shard: a subscription at
the tip of a shard checks, with one GetRecords of one record after the last record (a
:class:`~.polling.PollingReader` kept between checks), whether the shard ended; the answer
names its children as AWS does. The first check comes :data:`CLOSED_CHECK` seconds after the
subscription started or records last came, and each check that finds the shard open doubles
the wait, up to :data:`CLOSED_CHECK_MAX`: an idle open shard costs a GetRecords a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import http.client
import logging
import math
import queue
import random
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import botocore.exceptions
import urllib3.exceptions

from ..aws import event_stream, subscription_http
from ..aws.error_codes import error_code, is_in_use, is_transient
from ..aws.event_stream import Subscription
from ..aws.retry import Stopped, retry_call
from ..aws.subscription_http import LeanSubscription
from ..stats import StatReceiver
from ..waiting import WAKE, wait_event
from . import fanout_hub
from .kpl import MAGIC
from .polling import PollingReader, latest_at
from .position import StartPosition
from .reader import ApiRecord, OutsideRule, Page, user_records
from .shard_loop import ShardLoop, ThreadPool

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

__all__ = ["CLOSED_CHECK", "CLOSED_CHECK_MAX", "SubscriptionReader", "fanout_readers"]

log = logging.getLogger("kinsumer.reading")

#: Seconds before the first check of whether a shard at its tip has ended (see the module's description).
CLOSED_CHECK = 5.0
#: The longest wait between two such checks (seconds).
CLOSED_CHECK_MAX = 60.0
_BACKOFF_FIRST = 0.25  # seconds before the first new subscription after a failed one
_BACKOFF_MAX = 2.0
_JOIN = 5.0  # seconds close() waits for the pump
_LOOK = 1.0  # seconds: a waiting pump looks at the stop event at least this often
T = TypeVar("T")
_LOST = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError, botocore.exceptions.HTTPClientError)


class SubscriptionReader:
    """Reads one shard with SubscribeToShard (see the module's description)."""

    def __init__(
        self,
        kinesis: KinesisClient,
        stream_name: str,
        consumer_arn: str,
        shard_id: str,
        start: StartPosition,
        *,
        stats: StatReceiver | None = None,
        stop: threading.Event | None = None,
        closed_check: float | None = None,
        outside: OutsideRule | None = None,
    ) -> None:
        """``closed_check``: seconds from the start, or from the last records, to a check of whether the shard
        ended (see the module's description; default :data:`CLOSED_CHECK`); 0 for a shard known to be closed.
        ``outside``: what to do with the user records of KPL aggregates outside the shard's hash key range
        (None: deliver them, uncounted)."""
        closed_check = CLOSED_CHECK if closed_check is None else closed_check
        self._kinesis = kinesis
        self._stream_name = stream_name
        self._consumer_arn = consumer_arn
        self._shard_id = shard_id
        self._stats = stats or StatReceiver()
        self._stop = stop or threading.Event()
        self._outside = outside
        self._range_known = False  # the shard's hash key range was looked up (off the loop) and found
        self._position = start  # where a new subscription starts: after the last record handed on
        self._skip_from = start if start.sub_sequence is not None else None
        self._latest_at: dt.datetime | None = None
        self._lean = subscription_http.lean_subscriber(kinesis)  # None: botocore subscribes, on a thread of ours
        self._pages: queue.Queue[Page | BaseException] = queue.Queue(maxsize=1)
        self._closing = threading.Event()
        self._lock = threading.Lock()  # guards _hub
        self._hub: ShardLoop | None = None  # set when the pump starts
        self._task: asyncio.Task[None] | None = None  # the pump (on the hub's loop)
        self._room = asyncio.Event()  # set (on the loop) when a page was taken from the queue
        self._finished = threading.Event()  # the pump ended
        self._thread: ThreadPool | None = None  # the thread botocore's subscriptions are read on (without lean)
        self._events: LeanSubscription | _Botocore | None = None  # the open subscription
        self._events_seen = 0  # events of the current subscription
        self._ended = False
        self._closed_check = closed_check
        self._check_at = time.monotonic() + closed_check  # the next closed-shard check (monotonic time)
        self._check_wait = max(closed_check, CLOSED_CHECK / 2)  # doubled at each check, while the shard stays idle
        self._check: tuple[StartPosition, PollingReader] | None = None  # its reader, and the position it started at
        self._wake: Callable[[], None] = lambda: None  # told when a page was handed on (see on_ready)

    @property
    def shard_id(self) -> str:
        return self._shard_id

    @property
    def latest_at(self) -> dt.datetime | None:
        return self._latest_at

    def ready_at(self) -> float:
        """Now if an event's page (or the end, or an error) waits; else not before the pump hands one on.

        Starts the pump (the subscription) if it is not running yet.
        """
        self._start_pump()
        return -math.inf if self._ended or not self._pages.empty() else math.inf

    def on_ready(self, wake: Callable[[], None]) -> None:
        """``wake`` is called after each page the pump hands on."""
        self._wake = wake

    def next_page(self, limit: int | None = None) -> Page:
        """The next event's records (``limit`` does not apply: a page is what one event holds)."""
        if self._ended:
            return Page(self._shard_id, (), dt.datetime.now(dt.UTC), None, end_of_shard=True)
        hub = self._start_pump()
        while True:
            if self._stop.is_set():
                raise Stopped(self._shard_id)
            try:
                item = self._pages.get(timeout=WAKE)
            except queue.Empty:
                continue
            with contextlib.suppress(RuntimeError):  # the loop is closed (the interpreter exits)
                hub.loop.call_soon_threadsafe(self._room.set)
            if isinstance(item, BaseException):
                self._ended = True
                raise item
            self._ended = item.end_of_shard
            return item

    def _start_pump(self) -> ShardLoop:
        with self._lock:
            if self._hub is None:
                self._hub = fanout_hub.hub()
                self._hub.loop.call_soon_threadsafe(self._begin)
            return self._hub

    def _begin(self) -> None:  # on the loop
        if self._closing.is_set():
            self._finished.set()
            return
        self._task = asyncio.get_running_loop().create_task(self._pump_events())
        self._task.add_done_callback(lambda _: self._finished.set())

    def close(self) -> None:
        """End the subscription and the pump (bounded). Idempotent."""
        self._closing.set()
        with self._lock:
            hub = self._hub
        if hub is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs there any more
            hub.loop.call_soon_threadsafe(self._cancel)
        if _running_loop() is not hub.loop and not wait_event(self._finished, _JOIN):
            log.warning("the subscription of %s did not end within %g s", self._shard_id, _JOIN)

    def _cancel(self) -> None:  # on the loop, after _begin
        if self._task is not None:
            self._task.cancel()

    # ----------------------------------------------------------------- the pump (a coroutine on the hub)

    def _done(self) -> bool:
        return self._closing.is_set() or self._stop.is_set()

    def _waits(self, seconds: float, step: float) -> Iterator[float]:
        """The waits, each at most ``step``, that make a sleep of ``seconds`` (the reader's stop is looked at
        between them); raises Stopped when it comes first."""
        deadline = time.monotonic() + seconds
        while not self._done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            yield min(step, remaining)
        raise Stopped(self._shard_id)

    async def _sleep(self, seconds: float) -> None:
        for wait in self._waits(seconds, _LOOK):
            await asyncio.sleep(wait)

    def _sleep_blocking(self, seconds: float) -> None:  # between retries of a blocking call, on the hub's pool
        for wait in self._waits(seconds, WAKE):
            self._closing.wait(wait)

    async def _pump_events(self) -> None:
        failures = 0
        try:
            while not self._done():
                try:
                    self._events_seen = 0
                    if await self._follow(await self._subscribe()):
                        return  # the shard ended
                    if self._events_seen:
                        failures = 0  # the subscription ran its course: renew at once
                    else:  # ended before its first event: renew, but not in a tight loop
                        failures += 1
                        await self._sleep(min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (failures - 1)))
                except Exception as exc:
                    if self._done():
                        return
                    if not (is_transient(exc) or is_in_use(exc) or isinstance(exc, _LOST)):
                        raise
                    failures += 1
                    self._stats.error_retried("SubscribeToShard", error_code(exc))
                    level = logging.WARNING if failures % 30 == 10 else logging.DEBUG  # the 10th, then every 30th
                    log.log(level, "subscription of %s: %s (attempt %d); subscribing again at %s",
                            self._shard_id, error_code(exc), failures, self._position.kind)  # fmt: skip
                    backoff = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (failures - 1))
                    await self._sleep(backoff * (0.5 + random.random() / 2))
                finally:
                    self._close_events()
        except Stopped:
            return
        except Exception as exc:  # noqa: BLE001 - handed to the shard's worker, which reports it
            await self._hand_on(exc)
        finally:
            if self._thread is not None:
                self._thread.shutdown()

    async def _subscribe(self) -> LeanSubscription | _Botocore:
        """Open a subscription at the current position."""
        if self._position.kind == "LATEST":  # made concrete first, in the server's time, so it can be recorded
            self._latest_at = await self._call(lambda: latest_at(self._kinesis, self._stream_name, self._shard_id),
                                               "GetShardIterator")  # fmt: skip
            self._position = StartPosition.at_timestamp(self._latest_at)
        starting = self._position.starting_position()
        params = {"ConsumerARN": self._consumer_arn, "ShardId": self._shard_id, "StartingPosition": starting}
        if self._lean is not None:
            self._events = await self._lean.subscribe(params, self._io)
        else:
            if self._thread is None:
                self._thread = ThreadPool(1, f"kinsumer-efo-{self._shard_id}")
            self._events = _Botocore(
                await self._on_thread(lambda: event_stream.subscribe_to_shard(self._kinesis, **params)), self
            )
        return self._events

    async def _follow(self, subscription: LeanSubscription | _Botocore) -> bool:
        """Hand on the subscription's events until it ends (False) or the shard does (True)."""
        async with contextlib.aclosing(subscription.events()) as events:
            async for body in events:
                self._events_seen += 1
                raw: list[ApiRecord] = body.get("Records") or []
                behind = body.get("MillisBehindLatest")
                self._stats.records_fetched(self._shard_id, len(raw), behind)
                retrieved_at = dt.datetime.now(dt.UTC)
                covered_only, outside = False, 0
                if raw:
                    self._check_at = time.monotonic() + self._closed_check
                    self._check_wait = max(self._closed_check, CLOSED_CHECK / 2)
                    self._position = StartPosition.after(raw[-1]["SequenceNumber"])
                    await self._know_range(raw)
                    raw, outside = user_records(raw, self._shard_id, self._stats, self._skip_from, self._outside)
                    covered_only = not raw
                    self._skip_from = None
                continuation = body.get("ContinuationSequenceNumber")
                if covered_only and continuation is not None:
                    continue  # only what a start inside an aggregate covers: no page, as with polling
                if continuation is None:
                    children = tuple(str(child["ShardId"]) for child in body.get("ChildShards") or ())
                    end = Page(
                        self._shard_id, raw, retrieved_at, behind, end_of_shard=True, child_shards=children,
                        outside_range=outside,
                    )  # fmt: skip
                    await self._hand_on(end)
                    return True
                if not await self._hand_on(Page(self._shard_id, raw, retrieved_at, behind, outside_range=outside)):
                    return True
                if not raw and behind == 0 and await self._ended_at_tip():
                    return True
        return False

    async def _know_range(self, raw: list[ApiRecord]) -> None:
        """Look the shard's hash key range up on the pool (a ListShards the first time) when ``raw`` holds a KPL
        aggregate, so that :func:`~.reader.user_records` finds it known and the loop never waits for the call."""
        if self._outside is None or self._range_known or not any(r["Data"].startswith(MAGIC) for r in raw):
            return
        ranges = self._outside.ranges
        self._range_known = await self._io(lambda: ranges.of(self._shard_id)) is not None

    async def _hand_on(self, item: Page | BaseException) -> bool:
        """Put ``item`` in the queue of one, waiting for room; False if the reader is closing."""
        while not self._done() or isinstance(item, BaseException):
            self._room.clear()
            try:
                self._pages.put_nowait(item)
            except queue.Full:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_LOOK):  # and look at the stop event again
                        await self._room.wait()
                continue
            self._wake()
            return True
        return False

    async def _ended_at_tip(self) -> bool:
        """Whether the shard ended (see the module's description); hands the end on if so."""
        now = time.monotonic()
        if now < self._check_at:
            return False
        self._check_wait = min(CLOSED_CHECK_MAX, self._check_wait * 2)
        self._check_at = now + self._check_wait
        if self._check is None or self._check[0] != self._position:
            reader = PollingReader(self._kinesis, self._stream_name, self._shard_id, self._position, stop=self._stop)
            self._check = (self._position, reader)
        check = self._check[1]
        page = await self._io(lambda: check.next_page(1))
        if page.raw:  # not handed on yet: the subscription brings them (a new check starts after them)
            self._check = None
            return False
        if not page.end_of_shard:
            return False
        log.debug("%s ended (found by GetRecords: its subscription did not say)", self._shard_id)
        end = Page(self._shard_id, (), page.retrieved_at, 0, end_of_shard=True, child_shards=page.child_shards)
        await self._hand_on(end)
        return True

    async def _call(self, fn: Callable[[], T], operation: str) -> T:
        """``fn()`` with retries, on the hub's pool."""
        retried = functools.partial(retry_call, fn, operation=operation, stats=self._stats,
                                    sleep=self._sleep_blocking, should_stop=self._done)  # fmt: skip
        return await self._io(retried)

    async def _io(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the hub's pool."""
        assert self._hub is not None
        return await self._hub.io(fn)

    async def _on_thread(self, fn: Callable[[], T]) -> T:
        """``fn()`` on this reader's own thread (botocore's subscription, without lean)."""
        assert self._thread is not None
        return await asyncio.wrap_future(self._thread.submit(fn))

    def _close_events(self) -> None:  # on the loop
        events, self._events = self._events, None
        if events is not None:
            try:
                events.close()
            except Exception:
                log.debug("closing the subscription of %s failed", self._shard_id, exc_info=True)


class _Botocore:
    """A subscription botocore made, read on its reader's own thread (a blocking read an event at a time)."""

    def __init__(self, subscription: Subscription, reader: SubscriptionReader) -> None:
        self._subscription = subscription
        self._reader = reader

    async def events(self) -> AsyncGenerator[dict[str, Any], None]:
        events = self._subscription.events()
        while (body := await self._reader._on_thread(lambda: next(events, None))) is not None:
            yield body

    def close(self) -> None:
        """Close the connection (a read in progress on the reader's thread fails)."""
        self._subscription.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def fanout_readers(
    kinesis: KinesisClient,
    stream_name: str,
    consumer_arn: str,
    stats: StatReceiver,
    outside: OutsideRule | None = None,
) -> Callable[[str, StartPosition, threading.Event], SubscriptionReader]:
    """A reader factory: SubscriptionReaders of ``stream_name`` through the consumer ``consumer_arn``."""
    event_stream.install(kinesis)

    def make(shard_id: str, start: StartPosition, stop: threading.Event) -> SubscriptionReader:
        return SubscriptionReader(
            kinesis, stream_name, consumer_arn, shard_id, start, stats=stats, stop=stop, outside=outside
        )

    return make
