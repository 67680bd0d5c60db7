"""Time and waits in one place: a direct read of the system's clock (``time.monotonic``, ``time.time``...), a
``time.sleep`` or a ``.wait(`` outside :mod:`kinsumer.clock` and :mod:`kinsumer.waiting` is counted per module,
and no module may have more than its allowance below.

Code that reads time through :mod:`kinsumer.clock` (and waits through :mod:`kinsumer.waiting`) runs on the
simulator's virtual time (tests/sim); a direct read does not, so each one is a place the simulator cannot go
(issue 52: the record path on virtual time). A new one fails here: read ``kinsumer.clock`` instead, or, if the
system's clock is what is meant (a thread's own wait, a timing that is reported), raise the module's allowance
with a comment saying why. A module with fewer than its allowance fails too: lower it, so the list only shrinks.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kinsumer"
DIRECT = re.compile(r"\btime\.(?:monotonic|sleep|time|time_ns|perf_counter)\b|(?<!\bclock)\.wait\(")
#: The modules where time is read or waited on directly, and how often (2026-12-06: 122 in 41 modules; after the
#: record path moved onto kinsumer.clock and kinsumer.waiting: 92 in 36).
ALLOWED = {
    # the test kit: a fleet runs on real threads; its waits are the test's, its clocks default to the system's
    "kinsumer.testing._client": 3,
    "kinsumer.testing._kinesis": 1,
    "kinsumer.testing._ledger": 7,
    "kinsumer.testing._local": 1,
    "kinsumer.testing._tables": 1,
    "kinsumer.aws.call_watch": 2,
    "kinsumer.aws.first_contact": 1,
    "kinsumer.aws.retry": 1,
    "kinsumer.aws.stream_consumers": 3,
    "kinsumer.aws.tables": 3,
    "kinsumer.cli.__init__": 3,
    "kinsumer.cli.produce": 4,
    "kinsumer.cli.status_view": 3,
    "kinsumer.cli.tail": 3,
    "kinsumer.coordination.committer": 2,
    "kinsumer.coordination.coordinator": 4,
    "kinsumer.coordination.heartbeat": 1,
    "kinsumer.coordination.runtime": 1,
    "kinsumer.coordination.shard_worker": 2,  # its loop's timers (Poke.wait), on the loop's clock
    "kinsumer.delivery.delivery": 2,  # progress.wait (through waiting); a record's age, as reported
    "kinsumer.handling.batches": 4,
    "kinsumer.handling.timeouts": 6,
    "kinsumer.metrics": 1,
    "kinsumer.otel_metrics": 1,
    "kinsumer.reading.fanout": 7,
    "kinsumer.reading.reader": 1,
    "kinsumer.reading.shard_loop": 4,
    "kinsumer.reading.shard_ranges": 3,
    "kinsumer.running": 4,  # run()'s setup deadline and the waits of its first calls; the heartbeat's age
    "kinsumer.spark.batch_reader": 1,
    "kinsumer.spark.probe": 1,
    "kinsumer.spark.shard_range": 4,
    "kinsumer.spark.stream_reader": 1,
    "kinsumer.spark.stream_side": 2,
    "kinsumer.spark.trigger_wait": 1,
    "kinsumer.writing.writer": 3,
}


def direct_uses() -> dict[str, int]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if name in ("kinsumer.clock", "kinsumer.waiting"):
            continue
        count = len(DIRECT.findall(path.read_text()))
        if count:
            found[name] = count
    return found


def test_no_module_reads_time_or_waits_directly_more_than_it_is_allowed() -> None:
    found = direct_uses()
    over = {name: (count, ALLOWED.get(name, 0)) for name, count in found.items() if count > ALLOWED.get(name, 0)}
    assert over == {}, f"(found, allowed): read kinsumer.clock / wait through kinsumer.waiting instead: {over}"


def test_the_allowances_only_shrink() -> None:
    found = direct_uses()
    under = {name: (found.get(name, 0), allowed) for name, allowed in ALLOWED.items() if found.get(name, 0) < allowed}
    assert under == {}, f"(found, allowed): lower these allowances to what is found: {under}"


def test_the_pattern_finds_reads_sleeps_and_waits() -> None:
    direct = "t = time.monotonic()\nf = time.monotonic\ntime.sleep(1)\nevent.wait(2)\n"
    seam = "clock.monotonic()\nclock.wait(event, 1)\nwaiting.wait_event(e, 1)\n"
    assert len(DIRECT.findall(direct)) == 4 and DIRECT.findall(seam) == []
