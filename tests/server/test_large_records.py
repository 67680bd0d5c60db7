"""Records of up to 10 MiB, on kinesis-mock (0.6.2 takes UpdateMaxRecordSize and keeps to the limit it sets).

moto's server neither has UpdateMaxRecordSize nor says ``MaxRecordSizeInKiB``, and kinesalite refuses
records of more than 1 MiB: kinesis-mock is the one local server here with large records, for polling
and enhanced fan-out alike. The DynamoDB tables are on moto's server.

kinesis-mock takes about 9 s of CPU to take a 10 MiB record and 4 to hand it out: SIZES is written once per
server (``written_once``), aggregated and plain records in one stream, and each reader reads it once (next() by
polling and by fan-out, process() in the dead-letter test); the module's tests stay on one xdist worker, so on
one kinesis-mock, for the stream to be written once in a run of the suite too.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Kinsumer, Record, WriteError
from kinsumer.dead_letter import KinesisStream, S3Bucket
from kinsumer.dead_letters.reading import Filters, KinesisSource, Letter
from kinsumer.writing.writer import RecordWriter
from tests.conftest import unique
from tests.reshard import new_stream
from tests.server.conftest import SERVER_CONFIG

pytestmark = [pytest.mark.server, pytest.mark.xdist_group("large_records")]

MIB = 1024 * 1024
#: The largest record here: 10 MiB less 128 bytes. kinesis-mock takes a record of 10 MiB (data and key) but its
#: GetRecords fails (a 500, "last on empty queue") on one within about 60 bytes of it: it counts more than the
#: data and the key against its page's 10 MiB.
LARGEST = 10 * MIB - 128
#: A middling one: its dead letter's envelope (2 MiB in base64) is more than a stream of 1 MiB records takes.
MIDDLING = 3 * MIB // 2
#: (id, size), written in this order under one key by an aggregating writer: the largest, the middling one, one just
#: over the 1 MiB of other streams (each plain, in a call of its own), small ones. The small ones put beside
#: another go in one KPL aggregate (AGGREGATED); a lone one goes as the plain record it is.
SIZES = [(0, 200), (1, 250), (2, LARGEST), (3, 300), (4, MIDDLING), (5, 100), (6, 150), (7, MIB + 1), (8, 50)]
AGGREGATED = {0, 1, 5, 6}


def body(rid: int, size: int) -> bytes:
    head = json.dumps({"id": rid}).encode() + b"\n"
    return head + bytes(i % 251 for i in range(size - len(head)))


def large_stream(kinesis: Any, kib: int = 10240) -> str:
    stream = new_stream(kinesis, 2)
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    kinesis.update_max_record_size(StreamARN=arn, MaxRecordSizeInKiB=kib)
    summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    assert summary["MaxRecordSizeInKiB"] == kib
    return stream


def written(kinesis: Any, stream: str) -> dict[int, str]:
    """SIZES written with kinsumer's RecordWriter, aggregating (all under one key, so one shard keeps their order);
    the MD5 of each record's data by id."""
    writer = RecordWriter(kinesis, stream, aggregate=True)
    for rid, size in SIZES:
        writer.put(body(rid, size), "large-key")
    writer.flush()
    assert writer.records == len(SIZES)
    assert writer.entries == len(SIZES) - len(AGGREGATED) // 2  # two aggregates of two user records each
    return {rid: hashlib.md5(body(rid, size)).hexdigest() for rid, size in SIZES}


@attrs.frozen
class Source:
    kinesis: LocalServer
    dynamodb: LocalServer
    efo_consumer_name: str | None

    def client(self, stream: str) -> Kinsumer:
        config = attrs.evolve(SERVER_CONFIG, efo_consumer_name=self.efo_consumer_name)
        k = Kinsumer(
            stream, unique("app"), "a", config,
            kinesis=self.kinesis.client("kinesis"), dynamodb=self.dynamodb.client("dynamodb"),
        )  # fmt: skip
        k.create_required_tables()
        return k


@pytest.fixture(params=["polling", "fan-out"])
def source(request: pytest.FixtureRequest, kinesis_mock: LocalServer, moto_server: LocalServer) -> Iterator[Source]:
    yield Source(kinesis_mock, moto_server, None if request.param == "polling" else "large")


@attrs.frozen
class Written:
    stream: str
    digests: dict[int, str]  # of each record's data, by id


@pytest.fixture(scope="module")
def written_once() -> Callable[[LocalServer], Written]:
    """SIZES written once per server, for every test here to read in an application of its own."""
    streams: dict[str, Written] = {}

    def written_on(server: LocalServer) -> Written:
        key = server.endpoint  # a server restarted (ServerHolder) is on another port
        if key not in streams:
            kinesis = server.client("kinesis")
            stream = large_stream(kinesis)
            streams[key] = Written(stream, written(kinesis, stream))
        return streams[key]

    return written_on


@attrs.frozen
class Seen:
    rid: int
    digest: str  # of the record's data
    size: int
    aggregated: bool  # a user record of a KPL aggregate


def record_id(data: bytes) -> int:
    """The id in the first line of a record written by :func:`body`."""
    return int(json.loads(data.split(b"\n", 1)[0])["id"])


def seen(record: Record) -> Seen:
    data = record.data
    return Seen(record_id(data), hashlib.md5(data).hexdigest(), len(data), record.sub_sequence_number is not None)


def assert_whole_and_in_order(got: list[Seen], large: Written) -> None:
    """Every record of SIZES, once, in the order written (one key), its data whole; the aggregated ones as such."""
    assert [s.rid for s in got] == [rid for rid, _ in SIZES]
    assert {s.rid: s.digest for s in got} == large.digests
    assert max(s.size for s in got) == LARGEST
    assert {s.rid for s in got if s.aggregated} == AGGREGATED


def test_records_up_to_10_mib_aggregated_or_not_are_written_and_read_by_next_whole_and_in_order(
    source: Source, written_once: Callable[[LocalServer], Written]
) -> None:
    """Read by next() from each source (by process() too, polled: the dead-letter test below)."""
    large = written_once(source.kinesis)
    with source.client(large.stream) as k:
        got = []
        for _ in SIZES:
            record = k.next_record(timeout=60)
            assert record is not None, f"{len(got)} records read, then none for 60 s"
            got.append(seen(record))
    assert_whole_and_in_order(got, large)


def test_the_writer_keeps_to_the_stream_s_own_limit_read_from_its_description(kinesis_mock: LocalServer) -> None:
    kinesis = kinesis_mock.client("kinesis")
    small, middling = new_stream(kinesis, 1), large_stream(kinesis, kib=2048)
    writer = RecordWriter(kinesis, small)
    with pytest.raises(WriteError, match=rf"'k' is 1,048,577 bytes .*{small} takes 1,048,576 at most .*UpdateMax"):
        writer.put(b"x" * MIB, "k")
    writer = RecordWriter(kinesis, middling)
    writer.put(b"x" * (2 * MIB - 1), "k")  # its 2 MiB with the key
    with pytest.raises(WriteError, match=r"takes 2,097,152 at most"):
        writer.put(b"x" * (2 * MIB), "k")
    with pytest.raises(WriteError, match=r"Kinesis takes 10,485,760 at most"):
        writer.put(b"x" * (10 * MIB), "k")
    writer.flush()
    assert writer.records == 1 and writer.calls == 1


def test_process_hands_records_up_to_10_mib_whole_and_large_failed_ones_are_dead_lettered_into_a_large_stream(
    kinesis_mock: LocalServer, moto_server: LocalServer, written_once: Callable[[LocalServer], Written]
) -> None:
    """process() (polling) hands its handler every record whole and in order, as next() does: the handler's
    records do not depend on the reader that brought them. A 1.5 MiB failure's envelope (2 MiB in base64) goes
    into a dead-letter stream of 10 MiB records; the largest one's (13 MiB) only as a pointer to its claim check
    in S3 (moto's server)."""
    kinesis, s3 = kinesis_mock.client("kinesis"), moto_server.client("s3")
    large, dlq = written_once(kinesis_mock), large_stream(kinesis)
    stream, digests = large.stream, large.digests
    bucket = unique("bucket")
    s3.create_bucket(Bucket=bucket)
    failing = {2, 4, 6}  # the largest, the middling one, a small one of an aggregate
    handled: list[Seen] = []
    lock = threading.Lock()
    with Source(kinesis_mock, moto_server, None).client(stream) as k:

        def handler(record: Record) -> None:
            got = seen(record)
            with lock:
                handled.append(got)
                if len(handled) == len(SIZES):
                    threading.Thread(target=k.stop, daemon=True).start()
            if got.rid in failing:
                raise ValueError(f"cannot handle {got.rid}")

        sink = KinesisStream(dlq, client=kinesis, claim_check=S3Bucket(bucket, client=s3))
        k.process(handler, max_attempts=1, dead_letter=sink)
    assert_whole_and_in_order(handled, large)
    letters = list(KinesisSource(kinesis, s3, dlq).letters(Filters()))
    assert all(isinstance(letter, Letter) for letter in letters), letters
    by_id = {record_id(letter.dead.data or b""): letter for letter in letters if isinstance(letter, Letter)}
    assert set(by_id) == failing
    for rid, letter in by_id.items():
        assert letter.dead.data is not None and hashlib.md5(letter.dead.data).hexdigest() == digests[rid]
        assert letter.dead.reason == "raised" and letter.dead.stream == stream
    assert by_id[2].claim_check is not None and by_id[2].claim_check.bucket == bucket  # 13 MiB of envelope
    assert by_id[4].claim_check is None and by_id[6].claim_check is None  # in the stream itself
