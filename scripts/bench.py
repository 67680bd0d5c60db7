#!/usr/bin/env python3
"""kinsumer's benchmarks (``make bench``): prints one table and writes it to docs/benchmarks.md.

Every server runs on 127.0.0.1 and is stopped at the end. Figures are medians over ``--runs``
runs; each ratio compares contenders measured one after the other in the same run. See
docs/benchmarks.md for what each line measures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import importlib.metadata
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent), str(pathlib.Path(__file__).resolve().parents[1])]

from benchlib import (  # noqa: E402
    failover,
    fanout,
    go_contender,
    handlers,
    membership,
    movement,
    overhead,
    rebalance,
    scale,
    steady,
    streams,
    telemetry,
    throughput,
)
from benchlib.common import REPO, Measure, Row, median, rate_text  # noqa: E402

from demo import servers  # noqa: E402
from kinsumer import Config  # noqa: E402
from kinsumer.reading.polling import FIRST_PAGE  # noqa: E402
from tests.support.kinesalite import start_kinesalite  # noqa: E402
from tests.support.kinesis_mock import KINESIS_MOCK_DIR, start_kinesis_mock  # noqa: E402

SECTIONS = (
    "throughput", "kpl", "overhead", "spark", "failover", "rebalance", "movement", "steady", "fanout", "scale",
    "members", "streams", "handlers", "telemetry",
)  # fmt: skip
KPL_PER_RECORD = 100  # user records per Kinesis record in the KPL line
SHARDS = 8
RECORD_SIZE = 100
SPARK_RECORDS = 400_000  # the Spark rows' stream: Spark's start is under a tenth of the read
FANOUT_RECORDS = 20_000  # kinesis-mock is slower than kinesalite: fewer records keep the section short
KINESALITE_DIR = REPO / "tests" / "kinesalite"
PEER_PYTHON = REPO / ".venv-bench-peers" / "bin" / "python"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported (default 3)")
    parser.add_argument(
        "--records", type=int, default=100_000, help="records in the throughput stream (default 100000)"
    )
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument(
        "--out", type=pathlib.Path, default=REPO / "docs" / "benchmarks.md", help="where to write the table"
    )
    parser.add_argument(
        "--scale-shards", default=",".join(map(str, scale.SHARD_COUNTS)),
        help=f"comma-separated shard counts of the scale section (default {','.join(map(str, scale.SHARD_COUNTS))})",
    )
    parser.add_argument("--peer-python", default=str(PEER_PYTHON), help="the interpreter that has async-kinesis")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown or args.runs < 1 or args.records < SHARDS:
        parser.error(f"--only: unknown {sorted(unknown)}" if unknown else "--runs must be >= 1, --records >= 8")
    try:
        args.scale_shards = tuple(int(n) for n in args.scale_shards.split(","))
    except ValueError:
        parser.error(f"--scale-shards: not a list of shard counts: {args.scale_shards!r}")
    if not all(1 <= n <= scale.MAX_SHARDS for n in args.scale_shards):
        parser.error(f"--scale-shards: each between 1 and {scale.MAX_SHARDS}")
    return args


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def runs_of(count: int, what: str, measure: Callable[[], Measure | str]) -> list[Measure] | str:
    """``count`` measurements, or the reason one could not be taken."""
    results = []
    for n in range(count):
        result = measure()
        if isinstance(result, str):
            return result
        say(f"  {what} run {n + 1}: {result.rate:,.0f} records/s ({result.records} in {result.seconds:.2f} s)")
        results.append(result)
    return results


def throughput_rows(
    server: servers.LocalServer, name: str, args: argparse.Namespace, dynamodb: servers.LocalServer
) -> list[Row]:
    rows: list[Row] = []
    if "throughput" in args.only:
        say(f"{name}: filling an {SHARDS}-shard stream with {args.records} records of {RECORD_SIZE} bytes")
        filled = throughput.fill(server, SHARDS, args.records, RECORD_SIZE, dynamodb)
    if "throughput" in args.only:
        rates: dict[str, list[float]] = {
            "single": [], "threads": [], "kinsumer": [], "peer": [], "go": [], "process": [], "async": [],
        }  # fmt: skip
        lags: list[float] = []
        startups: dict[str, list[float]] = {"kinsumer": [], "go": []}
        cpus: dict[str, list[float]] = {"single": [], "threads": [], "kinsumer": [], "go": []}
        peer_problem, go_problem = "", args.go_binary if isinstance(args.go_binary, str) else ""
        for n in range(args.runs):  # the contenders in turn within each run
            single, threads = throughput.bare_loop(filled), throughput.bare_threads(filled)
            mine = throughput.kinsumer_next(filled)
            handled = throughput.kinsumer_process(filled)
            awaited = throughput.kinsumer_async_for(filled)
            rates["async"].append(awaited.rate)
            lags += awaited.loop_lags
            peer = throughput.async_kinesis(filled, args.peer_python)
            go: Measure | str = go_problem
            if not go_problem:
                go = go_contender.run(args.go_binary, server.endpoint, dynamodb.endpoint, filled.stream, filled.total)
            rates["single"].append(single.rate)
            rates["threads"].append(threads.rate)
            rates["kinsumer"].append(mine.rate)
            rates["process"].append(handled.rate)
            startups["kinsumer"].append(mine.startup or 0.0)
            for contender, measure in (("single", single), ("threads", threads), ("kinsumer", mine)):
                cpus[contender].append(measure.cpu_per_100k)
            if isinstance(peer, str):
                peer_problem = peer
            else:
                rates["peer"].append(peer.rate)
            if isinstance(go, str):
                go_problem = go
            else:
                rates["go"].append(go.rate)
                cpus["go"].append(go.cpu_per_100k)
                startups["go"].append(go.startup or 0.0)
            say(
                f"  run {n + 1}: bare 1 thread {single.rate:,.0f}, bare thread/shard {threads.rate:,.0f}, "
                f"kinsumer {mine.rate:,.0f} (first record after {mine.startup or 0:.2f} s), "
                f"process() {handled.rate:,.0f}, async for {awaited.rate:,.0f}, "
                f"CPU-s per 100k: bare thread/shard {threads.cpu_per_100k:.2f}, kinsumer {mine.cpu_per_100k:.2f}; "
                f"async-kinesis {peer if isinstance(peer, str) else f'{peer.rate:,.0f}'} records/s; "
                f"Go kinsumer {go if isinstance(go, str) else f'{go.rate:,.0f} records/s, {go.cpu_per_100k:.2f} CPU-s'}"
            )
        ratio_threads = median([k / t for k, t in zip(rates["kinsumer"], rates["threads"], strict=True)])
        ratio_single = median([k / s for k, s in zip(rates["kinsumer"], rates["single"], strict=True)])
        cpu_ratio = median([k / t for k, t in zip(cpus["kinsumer"], cpus["threads"], strict=True)])
        rows += [
            Row(
                "bare boto3 GetRecords loop, 1 thread (ceiling)",
                name,
                rate_text(median(rates["single"])),
                cpu_text(cpus["single"]),
            ),
            Row(
                "bare boto3 GetRecords loop, thread per shard (ceiling)",
                name,
                rate_text(median(rates["threads"])),
                cpu_text(cpus["threads"]),
            ),
            Row(
                "kinsumer, 1 client, `next()`",
                name,
                rate_text(median(rates["kinsumer"])),
                f"{ratio_threads:.2f}x thread per shard, {ratio_single:.2f}x 1 thread; "
                f"{cpu_text(cpus['kinsumer'])}, {cpu_ratio:.2f}x the thread-per-shard loop's (goal ≤ 0.45x); "
                f"first record after {median(startups['kinsumer']):.2f} s",
            ),
        ]
        ratio_process = median([p / k for p, k in zip(rates["process"], rates["kinsumer"], strict=True)])
        rows.append(
            Row(
                "kinsumer, 1 client, `process(handler)`, concurrency 1",
                name,
                rate_text(median(rates["process"])),
                f"{ratio_process:.2f}x the `next()` loop in the same run (goal ≥ 0.9x)",
            )
        )
        ratio_async = median([a / k for a, k in zip(rates["async"], rates["kinsumer"], strict=True)])
        versus_peer = ""
        if rates["peer"]:
            peer_ratio = median([a / p for a, p in zip(rates["async"], rates["peer"], strict=True)])
            versus_peer = f", {peer_ratio:.2f}x async-kinesis"
        lags.sort()

        def lag_at(q: float) -> float:
            return lags[min(len(lags) - 1, int(q * len(lags)))] * 1000 if lags else float("nan")

        rows.append(
            Row(
                "kinsumer, 1 client, `async for` (asyncio)",
                name,
                rate_text(median(rates["async"])),
                f"{ratio_async:.2f}x the `next()` loop in the same run (goal ≥ 0.9x){versus_peer}; "
                f"a ticker task's lag p50 {lag_at(0.5):.2f} ms, p99 {lag_at(0.99):.2f} ms (goal ≤ 5 ms)",
            )
        )
        if rates["go"] and len(rates["go"]) == len(rates["kinsumer"]):
            ratio_go = median([k / g for k, g in zip(rates["kinsumer"], rates["go"], strict=True)])
            cpu_go = median([k / g for k, g in zip(cpus["kinsumer"], cpus["go"], strict=True)])
            rows.append(
                Row(
                    "Go kinsumer (twitchscience), 1 client, `Next()`, its own process",
                    name,
                    rate_text(median(rates["go"])),
                    f"{cpu_text(cpus['go'])}; first record after {median(startups['go']):.2f} s; kinsumer is "
                    f"{ratio_go:.2f}x this (goal ≥ 1.0x at the server's ceiling) at {cpu_go:.2f}x its CPU per record "
                    "(goal ≤ 0.85x, then toward 0.7x)",
                )
            )
        else:
            rows.append(Row("Go kinsumer (twitchscience), 1 client, `Next()`, its own process", name, "—", go_problem))
        if rates["peer"]:
            ratio_peer = median([k / p for k, p in zip(rates["kinsumer"], rates["peer"], strict=True)])
            rows.append(
                Row(
                    "async-kinesis, 1 consumer",
                    name,
                    rate_text(median(rates["peer"])),
                    f"kinsumer is {ratio_peer:.2f}x this",
                )
            )
        else:
            rows.append(Row("async-kinesis, 1 consumer", name, "—", peer_problem))
    if "kpl" in args.only:
        rows += kpl_rows(server, name, args, dynamodb)
    return rows


def cpu_text(per_100k: list[float]) -> str:
    return f"{median(per_100k):.2f} CPU-s per 100k records"


def kpl_rows(
    server: servers.LocalServer, name: str, args: argparse.Namespace, dynamodb: servers.LocalServer
) -> list[Row]:
    say(f"{name}: {args.records} user records in KPL aggregates of {KPL_PER_RECORD}")
    filled = throughput.fill_aggregated(server, SHARDS, args.records, RECORD_SIZE, KPL_PER_RECORD, dynamodb)
    result = runs_of(args.runs, f"kinsumer over KPL aggregates ({name})", lambda: throughput.kinsumer_next(filled))
    assert not isinstance(result, str)
    after_first = [(m.records - 1) / (m.seconds - (m.startup or 0.0)) for m in result]
    startup = median([m.startup or 0.0 for m in result])
    return [
        Row(
            f"kinsumer, 1 client, `next()`, KPL aggregates of {KPL_PER_RECORD} (user records)",
            name,
            rate_text(median([m.rate for m in result])),
            f"{rate_text(median(after_first))} after the first record (which came after {startup:.2f} s); "
            f"{args.records} user records in {args.records // KPL_PER_RECORD} Kinesis records; goal ≥ 100k/s",
        )
    ]


def spark_rows(dynamodb: servers.LocalServer, args: argparse.Namespace) -> list[Row]:
    """The source at its default options against one kinsumer client on the same stream, in the same run.

    On kinesalite (DynamoDB on moto), a stream large enough that Spark's start is a small part of the read.
    """
    from benchlib.spark import AWS_ENV, batch_cost, spark_floor, spark_session, spark_source  # noqa: PLC0415

    from demo.spark_cluster import standalone_cluster  # noqa: PLC0415

    rows = []
    with tempfile.TemporaryDirectory() as logs, start_kinesalite(pathlib.Path(logs) / "kinesalite.log") as kinesalite:
        say(f"spark: an {SHARDS}-shard stream on kinesalite with {SPARK_RECORDS} records of {RECORD_SIZE} bytes")
        filled = throughput.fill(kinesalite, SHARDS, SPARK_RECORDS, RECORD_SIZE, dynamodb)
        for where in ("local[2]", "standalone cluster, 2 workers of 1 core"):
            with contextlib.ExitStack() as stack:
                say(f"spark: {where}")
                if where == "local[2]":
                    session = spark_session()
                else:
                    cluster = stack.enter_context(standalone_cluster(workers=2, cores=1))
                    session = cluster.session("kinsumer-bench", executor_env=AWS_ENV)
                stack.callback(session.stop)
                spark_source(session, filled)  # warm: Spark's Python workers start, the JVM compiles
                ratios, cpu_ratios, sources, cpus, clients, client_cpus, floors, busy = [], [], [], [], [], [], [], []
                for n in range(args.runs):  # the contenders in turn within each run
                    server_cpu = _cpu_seconds(kinesalite.process.pid)
                    client = throughput.kinsumer_next(filled)
                    server_cpu, between = _cpu_seconds(kinesalite.process.pid), server_cpu
                    busy.append((server_cpu - between) / client.seconds)
                    source = spark_source(session, filled)
                    floors.append(spark_floor(session))
                    clients.append(client.rate)
                    client_cpus.append(client.cpu_per_100k)
                    sources.append(source.total)
                    cpus.append(source.worker_cpu)
                    ratios.append(source.total / client.rate)
                    cpu_ratios.append(source.worker_cpu / client.cpu_per_100k)
                    say(f"  run {n + 1}: Spark source {source.total:,.0f} rec/s, its Python workers "
                        f"{source.worker_cpu:.2f} CPU-s per 100k; one kinsumer client {client.rate:,.0f} rec/s, "
                        f"{client.cpu_per_100k:.2f} CPU-s per 100k (kinesalite busy {busy[-1]:.0%} of a core); "
                        f"a one-row Python source's first batch after {floors[-1]:.2f} s")  # fmt: skip
                cost = batch_cost(session, filled)
                say(f"  a micro-batch of one record per shard: {cost:.0f} ms")
                rows.append(
                    Row(
                        f"Spark source, {where}, {SPARK_RECORDS // 1000}k records, availableNow into noop",
                        "kinesalite",
                        rate_text(median(sources)),
                        f"{median(ratios):.2f}x one kinsumer client in the same run ({rate_text(median(clients))}; "
                        f"goal ≥ 1.0x); Python workers {median(cpus):.2f} CPU-s per 100k rows, "
                        f"{median(cpu_ratios):.2f}x the client's {median(client_cpus):.2f} (goal ≤ 1.5x); "
                        f"kinesalite's one process {median(busy):.0%} busy while the client reads; "
                        f"a micro-batch costs {cost:.0f} ms whatever it holds; any Python source's first batch "
                        f"(one row) after {median(floors):.2f} s",
                    )
                )
    return rows


def _cpu_seconds(pid: int) -> float:
    """CPU-seconds a process has used so far (Linux /proc)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def overhead_rows(server: servers.LocalServer, args: argparse.Namespace) -> list[Row]:
    memory = overhead.MemoryKinesis("in-memory", SHARDS, args.records // SHARDS, RECORD_SIZE)
    result = runs_of(args.runs, "in-memory kinsumer", lambda: overhead.kinsumer_in_memory(server, memory))
    assert not isinstance(result, str)
    cpu_rate = median([m.records / m.cpu for m in result if m.cpu])
    per_record = median([m.cpu / m.records * 1e6 for m in result if m.cpu])
    steady = median([m.steady_cpu / (m.records - 1) * 1e6 for m in result if m.steady_cpu])
    per_shard, page = args.records // SHARDS, Config().max_records_per_call
    pages = 1 + max(0, -(-(per_shard - FIRST_PAGE) // page))  # the first page, then full ones
    wall, startup = median([m.rate for m in result]), median([m.startup or 0.0 for m in result])
    return [
        Row(
            "kinsumer, 1 client, `next()`, in-memory Kinesis (library overhead)",
            "none (DynamoDB: moto)",
            f"{rate_text(cpu_rate)} of CPU",
            f"{per_record:.2f} µs per record (CPU; goal ≥ 300k rec/s), {steady:.2f} µs from the first record on "
            f"(setup excluded); wall clock {rate_text(wall)}, first record after {startup:.2f} s, bound by each "
            f"shard's {pages} GetRecords at least {Config().throttle_delay:g} s apart (throttle_delay)",
        )
    ]


HOT_SHARD_RECORDS = 400  # one shard's records for the hot-shard rows (at 20 ms each: 8 s one at a time)
PROCESS_SHARDS, PROCESS_RECORDS = 4, 100_000  # the stream of the process() overhead rows


def handlers_rows(server: servers.LocalServer, args: argparse.Namespace) -> list[Row]:
    """``process()``: a hot shard with a handler waiting on I/O, by shard and by key; the CPU per record of
    the handler options, with a handler doing nothing (same run, one after the other)."""
    hot = overhead.MemoryKinesis("hot", 1, HOT_SHARD_RECORDS, RECORD_SIZE, keys=100)
    rates = {}
    for ordering in ("shard", "key"):
        measure = functools.partial(handlers.process_in_memory, server, hot, 0.02, concurrency=8, ordering=ordering)
        result = runs_of(args.runs, f"hot shard, ordering={ordering}", measure)
        assert not isinstance(result, str)
        rates[ordering] = median([(m.records - 1) / (m.seconds - (m.startup or 0.0)) for m in result])
    rows = [
        Row(
            "`process()`, one hot shard (100 keys), handler waiting 20 ms, `concurrency=8`",
            "none (DynamoDB: moto)",
            f"{rates['key']:.0f} rec/s by key, {rates['shard']:.0f} rec/s by shard",
            f'`ordering="key"` {rates["key"] / rates["shard"]:.1f} times `ordering="shard"` (goal: at least 5, '
            f"at most 8 with 8 workers); {HOT_SHARD_RECORDS} records in memory, from the first record on",
        )
    ]
    memory = overhead.MemoryKinesis("in-memory", PROCESS_SHARDS, PROCESS_RECORDS // PROCESS_SHARDS, RECORD_SIZE)
    variants: dict[str, dict[str, Any]] = {
        "options unset": {},
        "`max_record_age=3600`": {"max_record_age": 3600.0},
        "`timeout=30`": {"timeout": 30.0},
    }
    cpu: dict[str, float] = {}
    for name, options in variants.items():
        measure = functools.partial(handlers.process_in_memory, server, memory, **options)
        result = runs_of(args.runs, f"process(), {name}", measure)
        assert not isinstance(result, str)
        cpu[name] = median([m.cpu / m.records * 1e6 for m in result if m.cpu])
    base = cpu["options unset"]
    rows.append(
        Row(
            "`process()` CPU per record, handler doing nothing, 1 worker",
            "none (DynamoDB: moto)",
            ", ".join(f"{name} {value:.2f} µs" for name, value in cpu.items()),
            ", ".join(f"{name} {value / base - 1:+.0%}" for name, value in list(cpu.items())[1:])
            + f" against options unset; {PROCESS_RECORDS} records over {PROCESS_SHARDS} shards, in memory",
        )
    )
    return rows


def telemetry_rows(server: servers.LocalServer, args: argparse.Namespace) -> list[Row]:
    """``process()``'s CPU per record with OpenTelemetry's metrics, spans, both and neither (a process each)."""
    say("telemetry: process() with OpenTelemetry metrics and spans")
    cpu = telemetry.cpu_per_record(server, args.runs)
    base = cpu["neither"]
    return [
        Row(
            "`process()` CPU per record with OpenTelemetry (SDK configured), handler doing nothing",
            "none (DynamoDB: moto)",
            ", ".join(f"{name} {value:.1f} µs" for name, value in cpu.items()),
            ", ".join(f"{name} {value / base - 1:+.0%}" for name, value in list(cpu.items())[1:])
            + f" against neither (goals: metrics ≤ +10%, spans ≤ +30%); CPU from the first record to the last "
            f"(the start and the stop left out); {telemetry.RECORDS} records over "
            f"{telemetry.SHARDS} shards in memory; periodic metric reader (1 s), batch span processor, exporters "
            "that drop",
        )
    ]


def failover_rows(server: servers.LocalServer, args: argparse.Namespace) -> list[Row]:
    rows = []
    for variant, bound in (("default", 15.0), ("tuned", 3.0)):
        seconds = []
        for n in range(args.runs):
            seconds.append(failover.failover_seconds(server, variant))
            say(f"  failover ({variant}) run {n + 1}: {seconds[-1]:.2f} s")
        detail = "; ".join(f"{s:.2f}" for s in seconds) + f" s (target ≤ {bound:g} s)"
        rows.append(Row(f"fail-over after SIGKILL, {variant} config", "moto", f"{median(seconds):.2f} s", detail))
    return rows


def rebalance_rows(args: argparse.Namespace) -> list[Row]:
    tallies = []
    for n in range(args.runs):
        tallies.append(rebalance.clean_rebalance())
        say(f"  clean leave + join run {n + 1}: {tallies[-1]}")
    dups = [t.duplicates for t in tallies]
    lost = [t.lost for t in tallies]
    return [
        Row(
            "duplicates on a clean leave + join (auto mode, `make demo`)",
            "moto",
            f"{median(dups):.0f}",
            f"per run {dups} duplicates, {lost} lost, of {tallies[0].produced} records",
        )
    ]


def movement_rows() -> list[Row]:
    rows = []
    for shards, clients in ((8, 5), (30, 8)):
        for m in movement.movement(shards, clients):
            after = clients - 1 if m.event == "leave" else clients + 1
            bound = -(-shards // after) + 1  # the bound: ceil(shards / clients) + 1
            rows.append(
                Row(
                    f"shards moved by a {m.event}, {shards} shards, {clients} clients, assignment={m.assignment!r}",
                    "none (the coordinator's computation, 2,000 random client sets)",
                    f"{m.mean:.2f}",
                    f"at most {m.most}" + (f" (bound for balanced: {bound})" if m.assignment == "balanced" else ""),
                )
            )
    return rows


def handler_rows(server: servers.LocalServer) -> list[Row]:
    """The DynamoDB budgets with the clients in ``process(handler)`` (the crash-loop guard's reservations)."""
    say("steady state again, the clients in process(handler)")
    state = steady.steady_state(server, handler=True)
    calls = ", ".join(f"{c:.0f}" for c in state.dynamodb_calls_per_minute)
    idle = ", ".join(f"{c:.0f}" for c in state.idle_calls_per_minute)
    return [
        Row(
            "DynamoDB calls per minute per client, `process(handler)`, busy / idle",
            "moto",
            f"{calls} / {idle}",
            "the same 2 clients and 8 shards in process(); goals ≤ 180 busy, ≤ 100 idle",
        )
    ]


#: (live clients, rows of clients that crashed 5 minutes ago) of the members section
MEMBERS = ((2, 0), (20, 0), (20, 40), (50, 0))


def members_rows(server: servers.LocalServer) -> list[Row]:
    """Membership reads with the roster against every client scanning, at each size in turn."""
    rows = []
    for clients, dead in MEMBERS:
        measured = {}
        for roster in (True, False):
            design = "the roster" if roster else "every client scans"
            say(f"membership: {clients} clients, {dead} rows of clients gone, {design}, {membership.WINDOW:.0f} s")
            measured[roster] = membership.membership(server, clients, dead, roster=roster)
        for roster, m in measured.items():
            other = measured[not roster]
            ratio = m.table_read_units_per_second / other.table_read_units_per_second
            rows.append(
                Row(
                    f"membership reads, {'roster' if roster else 'every client scans'}: each client's reads / read "
                    f"units per minute, {clients} clients" + (f" and {dead} rows of clients gone" if dead else ""),
                    "moto",
                    f"{m.reads_per_minute:.0f} / {m.read_units_per_minute:.0f}",
                    f"the table: {m.table_read_units_per_second:.1f} read units/s in all ({ratio:.2f}x the other "
                    f"design's, measured just {'after' if roster else 'before'}); scans {m.scans_per_minute:.1f} per "
                    f"client-minute; ListShards {m.list_shards_per_second:.2f}/s in all (the stream allows 100/s); "
                    "default config, idle stream",
                )
            )
    return rows


def streams_rows(server: servers.LocalServer, runs: int) -> list[Row]:
    """One application reading two streams against an application per stream, on the same records."""
    total, shards = 2 * streams.RECORDS, 2 * streams.SHARDS
    say(f"streams: 2 streams of {streams.SHARDS} shards, {streams.RECORDS} records of {streams.SIZE} bytes in each")
    measured = streams.compare(server, runs, say)
    rates = {c: median([m.rate for m in ms]) for c, ms in measured.items()}
    calls = {c: median([m.calls_per_shard_minute for m in ms]) for c, ms in measured.items()}
    per_read = {c: median([m.dynamodb_calls / m.shards for m in ms]) for c, ms in measured.items()}
    duplicates = {c: sum(m.duplicates for m in ms) for c, ms in measured.items()}
    two, single = streams.CONTENDERS
    pairs = list(zip(measured[two], measured[single], strict=True))  # the same run's
    rate_ratio = median([a.rate / b.rate for a, b in pairs])
    call_ratio = median([a.calls_per_shard_minute / b.calls_per_shard_minute for a, b in pairs])
    shape = {
        two: f"one application listing both streams, {streams.CLIENTS} clients",
        single: f"an application per stream, {streams.CLIENTS} clients each ({2 * streams.CLIENTS} in all)",
    }
    same = (
        f"both contenders read the same {total} records ({shards} shards) from TRIM_HORIZON in the same run, "
        "taking turns at going first; run() to the last record, default config, every record delivered"
    )
    return [
        Row(
            f"two streams, {contender}: records/s / DynamoDB calls per shard-minute",
            "moto",
            f"{rate_text(rates[contender])} / {calls[contender]:.0f} calls per shard-minute",
            f"{shape[contender]}; {same}, {duplicates[contender]} duplicates; "
            f"{per_read[contender]:.1f} DynamoDB calls per shard over the read"
            + (
                f"; {rate_ratio:.2f}x the records/s and {call_ratio:.2f}x the DynamoDB calls per shard-minute of "
                "the single-stream apps (goal: the same records/s and calls per shard)"
                if contender == two
                else ""
            ),
        )
        for contender in streams.CONTENDERS
    ]


def steady_rows(server: servers.LocalServer) -> list[Row]:
    say(f"steady state: 2 clients, 1 record / {steady.INTERVAL * 1000:.0f} ms, {steady.WINDOW:.0f} s window")
    state = steady.steady_state(server)
    latencies = state.latencies
    if not latencies:
        raise RuntimeError("steady state: no record was delivered in the window")

    def percentile(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    calls = ", ".join(f"{c:.0f}" for c in state.dynamodb_calls_per_minute)
    idle = ", ".join(f"{c:.0f}" for c in state.idle_calls_per_minute)
    return [
        Row(
            "end-to-end latency put → `next()`, p50 / p99",
            "moto",
            f"{percentile(0.5):.0f} / {percentile(0.99):.0f} ms",
            f"{len(latencies)} records, {len(latencies) / steady.WINDOW:.0f}/s; "
            "target p50 ≤ throttle_delay + 100 ms = 350 ms",
        ),
        Row(
            "DynamoDB calls per minute per client, records flowing into every shard",
            "moto",
            calls,
            "2 clients, 8 shards, default config; goal ≤ 180",
        ),
        Row(
            "DynamoDB calls per minute per client, idle",
            "moto",
            idle,
            "the same clients, nothing written; goal ≤ 100",
        ),
        *handler_rows(server),
    ]


def fanout_rows(dynamodb: servers.LocalServer, args: argparse.Namespace) -> list[Row]:
    records = min(args.records, FANOUT_RECORDS)
    say(f"enhanced fan-out against polling on kinesis-mock: {fanout.SHARDS} shards, {records} records, latency")
    limit = 2 * max(fanout.THREAD_SHARDS)
    with tempfile.TemporaryDirectory() as logs, start_kinesis_mock(pathlib.Path(logs) / "kinesis-mock.log",
                                                                   shard_limit=limit) as mock:  # fmt: skip
        measured: dict[str, list[Measure]] = {mode: [] for mode in fanout.MODES}
        for _ in range(args.runs):  # the modes take turns, so the machine's noise falls on both
            for mode in fanout.MODES:
                measured[mode].append(fanout.throughput(mock, dynamodb, mode, records, RECORD_SIZE))
        waits = {mode: fanout.latencies(mock, dynamodb, mode) for mode in fanout.MODES}
        say(f"threads of a fan-out client at {', '.join(map(str, fanout.THREAD_SHARDS))} shards")
        threads = {shards: fanout.threads(mock, dynamodb, shards) for shards in fanout.THREAD_SHARDS}

    def percentile(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] * 1000 if values else float("nan")

    return [
        Row(
            "end-to-end latency put → `next()`, p50 / p99, polling vs enhanced fan-out",
            "kinesis-mock",
            "; ".join(f"{mode} {percentile(w, 0.5):.0f} / {percentile(w, 0.99):.0f} ms" for mode, w in waits.items()),
            f"1 client, {fanout.SHARDS} shards, 1 record / {fanout.INTERVAL * 1000:.0f} ms, {fanout.WINDOW:.0f} s; "
            "kinesis-mock pushes one event per shard a second",
        ),
        Row(
            "records/s through `next()`, polling vs enhanced fan-out",
            "kinesis-mock",
            "; ".join(f"{mode} {rate_text(median([m.rate for m in ms]))}" for mode, ms in measured.items()),
            f"{records} records of {RECORD_SIZE} bytes written first, {fanout.SHARDS} shards, default settings",
        ),
        Row(
            "threads of the process, one enhanced fan-out client",
            "kinesis-mock",
            "; ".join(f"{shards} shards: {count}" for shards, count in threads.items()),
            "the most while every shard is subscribed and a record of each read; default settings "
            "(the client's call pool: at most 32 threads)",
        ),
    ]


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"
    )


def versions(peer_python: str) -> str:
    found = [f"{name} {importlib.metadata.version(name)}" for name in ("boto3", "botocore", "moto")]
    package = KINESALITE_DIR / "node_modules" / "kinesalite" / "package.json"
    if package.exists():
        found.append(f"kinesalite {json.loads(package.read_text())['version']} (node {_node_version()})")
    mock = KINESIS_MOCK_DIR / "node_modules" / "kinesis-local" / "package.json"
    if mock.exists():
        found.append(f"kinesis-mock (npm kinesis-local) {json.loads(mock.read_text())['version']}")
    go = shutil.which("go")
    if go is not None:
        done = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
        found.append(done.stdout.strip().removeprefix("go version ") or "go")
    if os.path.exists(peer_python):
        code = "import importlib.metadata as m; print(m.version('async-kinesis'), m.version('aiobotocore'))"
        done = subprocess.run([peer_python, "-c", code], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            peer, aio = done.stdout.split()
            found.append(f"async-kinesis {peer} (aiobotocore {aio})")
    return ", ".join(found)


def _node_version() -> str:
    done = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


def table(rows: list[Row]) -> str:
    lines = ["| benchmark | server | median | detail |", "|---|---|---|---|"]
    lines += [f"| {r.benchmark} | {r.server} | {r.figure} | {r.detail} |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # only local servers are used: fake credentials, never the developer's (Spark's workers inherit them)
    os.environ.update(AWS_ACCESS_KEY_ID="local", AWS_SECRET_ACCESS_KEY="local", AWS_DEFAULT_REGION=servers.REGION)
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(name, None)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as go_work, servers.moto_server() as server:
        args.go_binary = "not measured"
        if "throughput" in args.only:
            say("building the Go kinsumer contender")
            args.go_binary = go_contender.build(pathlib.Path(go_work))
            say(f"  {args.go_binary}")
        say(f"moto server at {server.endpoint}")
        if {"throughput", "kpl"} & set(args.only.split(",")):
            rows += throughput_rows(server, "moto", args, dynamodb=server)
        if {"throughput", "kpl"} & set(args.only.split(",")):
            with tempfile.TemporaryDirectory() as logs:
                kinesalite = start_kinesalite(pathlib.Path(logs) / "kinesalite.log")
                with kinesalite:
                    say(f"kinesalite at {kinesalite.endpoint} (DynamoDB: moto)")
                    rows += throughput_rows(kinesalite, "kinesalite", args, dynamodb=server)
        if "spark" in args.only:
            rows += spark_rows(server, args)
        if "overhead" in args.only:
            rows += overhead_rows(server, args)
        if "failover" in args.only:
            rows += failover_rows(server, args)
        if "handlers" in args.only:
            rows += handlers_rows(server, args)
        if "telemetry" in args.only:
            rows += telemetry_rows(server, args)
        if "steady" in args.only:
            rows += steady_rows(server)
        if "members" in args.only:
            rows += members_rows(server)
        if "streams" in args.only:
            rows += streams_rows(server, args.runs)
        if "fanout" in args.only:
            rows += fanout_rows(server, args)
        if "scale" in args.only:
            with tempfile.TemporaryDirectory() as logs, start_kinesalite(pathlib.Path(logs) / "k.log") as kinesalite:
                say(f"scale: kinesalite at {kinesalite.endpoint}, DynamoDB on moto's server")
                rows += scale.scale_rows(kinesalite, server, say, args.scale_shards)
    if "movement" in args.only:
        rows += movement_rows()
    if "rebalance" in args.only:
        rows += rebalance_rows(args)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"Measured {when} by `make bench` (median of {args.runs} runs; {SHARDS} shards, "
        f"{args.records} records of {RECORD_SIZE} bytes)\n\n"
        f"- machine: {machine()}\n- software: {versions(args.peer_python)}\n"
        "- servers: moto's server, kinesalite and kinesis-mock, all on 127.0.0.1 of the same machine\n"
    )
    text = table(rows)
    print(header + "\n" + text)
    full = set(args.only.split(",")) == set(SECTIONS)
    note = None if full else f"- the rows of `scripts/bench.py --only {args.only}`: measured {when}"
    write(args.out, header, rows, note)
    say(f"written to {args.out}")
    return 0


_BEGIN, _END = "<!-- bench:begin -->", "<!-- bench:end -->"


def write(path: pathlib.Path, header: str, rows: list[Row], note: str | None = None) -> None:
    """Write the results between the markers of ``path`` (the rest is prose).

    A full run (``note`` None) replaces the block. A run of some sections replaces the rows it
    measured (same benchmark and server) and adds the rest, keeps the other rows, and adds
    ``note`` to the block's header, so every row still says when it was measured.
    """
    current = path.read_text() if path.exists() else ""
    if _BEGIN not in current or _END not in current:
        current = f"# Benchmarks\n\n{_BEGIN}\n{_END}\n"
    before, rest = current.split(_BEGIN, 1)
    block, after = rest.split(_END, 1)
    if note is not None and "| benchmark |" in block:
        old_header, old_table = block.strip("\n").split("| benchmark |", 1)
        fresh = {(r.benchmark, r.server): r for r in rows}
        kept: list[Row] = []
        for line in old_table.splitlines()[2:]:  # after the header line and the |---| line
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            if len(cells) == 4:
                kept.append(fresh.pop((cells[0], cells[1]), Row(*cells)))
        rows = kept + list(fresh.values())
        header = old_header.rstrip("\n") + "\n" + note + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{before}{_BEGIN}\n{header}\n{table(rows)}\n{_END}{after}")


if __name__ == "__main__":
    sys.exit(main())
