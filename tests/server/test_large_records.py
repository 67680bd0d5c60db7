"""Records of up to 10 MiB, on kinesis-mock (0.6.2 takes UpdateMaxRecordSize and keeps to the limit it sets).

moto's server neither has UpdateMaxRecordSize nor says ``MaxRecordSizeInKiB``, and kinesalite refuses
records of more than 1 MiB: kinesis-mock is the one local server here with large records, for polling
and enhanced fan-out alike. The DynamoDB tables are on moto's server.
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

pytestmark = pytest.mark.server

MIB = 1024 * 1024
#: The largest record here: 10 MiB less 128 bytes. kinesis-mock takes a record of 10 MiB (data and key) but its
#: GetRecords fails (a 500, "last on empty queue") on one within about 60 bytes of it: it counts more than the
#: data and the key against its page's 10 MiB.
LARGEST = 10 * MIB - 128
#: (id, size): the largest, a middling one, one just over the 1 MiB of other streams, small ones
SIZES = [(0, 200), (1, LARGEST), (2, 300), (3, 3 * MIB), (4, 100), (5, MIB + 1), (6, 50)]


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


def written(kinesis: Any, stream: str, aggregate: bool) -> dict[int, str]:
    """SIZES written with kinsumer's RecordWriter (all under one key, so one shard keeps their order); the MD5 of
    each record's data by id."""
    writer = RecordWriter(kinesis, stream, aggregate=aggregate)
    for rid, size in SIZES:
        writer.put(body(rid, size), "large-key")
    writer.flush()
    assert writer.records == len(SIZES)
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
def written_once() -> Callable[[LocalServer, bool], Written]:
    """SIZES written once per server and aggregation, for every test here to read in an application of its own:
    kinesis-mock takes about 9 s of CPU to take a 10 MiB record, and 4 to hand it out."""
    streams: dict[tuple[str, bool], Written] = {}

    def written_on(server: LocalServer, aggregate: bool) -> Written:
        key = (server.endpoint, aggregate)  # a server restarted (ServerHolder) is on another port
        if key not in streams:
            kinesis = server.client("kinesis")
            stream = large_stream(kinesis)
            streams[key] = Written(stream, written(kinesis, stream, aggregate))
        return streams[key]

    return written_on


def seen(record: Record) -> tuple[int, str, int]:
    return json.loads(record.data.split(b"\n", 1)[0])["id"], hashlib.md5(record.data).hexdigest(), len(record.data)


@pytest.mark.parametrize("aggregate", [False, True])
def test_records_up_to_10_mib_are_written_and_read_by_next_whole_and_in_order_and_by_process(
    source: Source, aggregate: bool, written_once: Callable[[LocalServer, bool], Written]
) -> None:
    """Read by next() from each source, and, written plain and polled, by process() too: the handler's records
    do not depend on the reader that brought them."""
    large = written_once(source.kinesis, aggregate)
    with source.client(large.stream) as k:
        got = []
        for _ in SIZES:
            record = k.next_record(timeout=60)
            assert record is not None, f"{len(got)} records read, then none for 60 s"
            got.append(seen(record))
    assert [rid for rid, _, _ in got] == [rid for rid, _ in SIZES]  # one key: in the order written
    assert {rid: digest for rid, digest, _ in got} == large.digests
    assert max(size for _, _, size in got) == LARGEST
    if not aggregate and source.efo_consumer_name is None:
        assert handled_by_process(source, large.stream) == large.digests


def handled_by_process(source: Source, stream: str) -> dict[int, str]:
    """What process() hands its handler of ``stream`` (every record of SIZES), by id: its data's MD5."""
    handled: list[tuple[int, str, int]] = []
    lock = threading.Lock()
    with source.client(stream) as k:

        def handler(record: Record) -> None:
            with lock:
                handled.append(seen(record))
                if len(handled) == len(SIZES):
                    threading.Thread(target=k.stop, daemon=True).start()

        k.process(handler)
    return {rid: digest for rid, digest, _ in handled}


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


def test_large_failed_records_are_dead_lettered_into_a_large_stream_and_past_its_limit_through_s3(
    kinesis_mock: LocalServer, moto_server: LocalServer, written_once: Callable[[LocalServer, bool], Written]
) -> None:
    """A 3 MiB failure's envelope (4 MiB in base64) goes into a dead-letter stream of 10 MiB records; the
    largest one's (13 MiB) only as a pointer to its claim check in S3 (moto's server)."""
    kinesis, s3 = kinesis_mock.client("kinesis"), moto_server.client("s3")
    large, dlq = written_once(kinesis_mock, False), large_stream(kinesis)
    stream, digests = large.stream, large.digests
    bucket = unique("bucket")
    s3.create_bucket(Bucket=bucket)
    failing = {1, 3, 6}  # the largest, the middling one, a small one
    done: list[int] = []
    lock = threading.Lock()
    with source_client(kinesis_mock, moto_server, stream) as k:

        def handler(record: Record) -> None:
            rid = seen(record)[0]
            with lock:
                done.append(rid)
                if len(done) == len(SIZES):
                    threading.Thread(target=k.stop, daemon=True).start()
            if rid in failing:
                raise ValueError(f"cannot handle {rid}")

        sink = KinesisStream(dlq, client=kinesis, claim_check=S3Bucket(bucket, client=s3))
        k.process(handler, max_attempts=1, dead_letter=sink)
    letters = list(KinesisSource(kinesis, s3, dlq).letters(Filters()))
    assert all(isinstance(letter, Letter) for letter in letters), letters
    by_id = {seen_data(letter.dead.data)[0]: letter for letter in letters if isinstance(letter, Letter)}
    assert set(by_id) == failing
    for rid, letter in by_id.items():
        assert letter.dead.data is not None and hashlib.md5(letter.dead.data).hexdigest() == digests[rid]
        assert letter.dead.reason == "raised" and letter.dead.stream == stream
    assert by_id[1].claim_check is not None and by_id[1].claim_check.bucket == bucket  # 13 MiB of envelope
    assert by_id[3].claim_check is None and by_id[6].claim_check is None  # in the stream itself


def seen_data(data: bytes | None) -> tuple[int, int]:
    assert data is not None
    return json.loads(data.split(b"\n", 1)[0])["id"], len(data)


def source_client(kinesis: LocalServer, dynamodb: LocalServer, stream: str) -> Kinsumer:
    return Source(kinesis, dynamodb, None).client(stream)
