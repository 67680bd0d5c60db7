"""Every DynamoDB call a Kinsumer makes on its tables reaches ``StatReceiver.dynamodb_call``, once, with its
operation, its table and its outcome: counted against an HTTP relay between the client and moto's server,
which sees each request as it really goes out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import attrs
import botocore.exceptions
import pytest

from demo.servers import LocalServer, client
from kinsumer import Kinsumer
from kinsumer.aws.call_watch import CallWatch
from kinsumer.aws.tables import Tables
from tests.helpers import DynamoDBCalls, wait_until
from tests.relay import KinesisRelay
from tests.server.conftest import SERVER_CONFIG

pytestmark = pytest.mark.server


def test_each_call_on_the_tables_is_reported_once_with_its_table_and_outcome(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str
) -> None:
    stream = new_stream(2)
    # the third PutItem (a heartbeat, or the leader's lease) is throttled, as a provisioned table does;
    # botocore's own retries are off, so one request is one call
    throttled = lambda operation, n: "throttled" if operation == "PutItem" and n == 3 else None  # noqa: E731
    with KinesisRelay(moto_server.endpoint, call_fault=throttled) as relay:
        db = client(relay.endpoint, "dynamodb", retries={"total_max_attempts": 1})
        calls = DynamoDBCalls()
        config = attrs.evolve(SERVER_CONFIG, stats=calls)
        k = Kinsumer(stream, app, "watched", config, kinesis=moto_server.client("kinesis"), dynamodb=db)
        k.create_required_tables()
        created = dict(relay._operation_calls)  # create_required_tables() is before run(): not watched
        moto_server.client("kinesis").put_record(StreamName=stream, Data=b"x", PartitionKey="k")
        k.run()
        try:
            assert k.next(timeout=30) == b"x"
            wait_until(lambda: calls.count("UpdateItem") >= 2 and calls.count("PutItem") >= 4, 30, "commits and beats")
        finally:
            k.stop()
        with calls.lock:
            seen = list(calls.seen)
        sent = Counter(relay._operation_calls) - Counter(created)
        # no call after stop(): the watch is detached (a call now is the test's, not the consumer's)
        db.describe_table(TableName=k.tables.clients)
        assert len(calls.seen) == len(seen)
    reported = Counter(op for op, _, _, _ in seen)
    assert reported == sent, f"reported {dict(reported)}, sent {dict(sent)}"
    assert {table for _, table, _, _ in seen} <= {"clients", "checkpoints", "metadata"}
    assert ("PutItem", "clients") in {(op, table) for op, table, _, _ in seen}  # heartbeats
    assert ("UpdateItem", "checkpoints") in {(op, table) for op, table, _, _ in seen}  # commits
    errors = [(op, table, e) for op, table, _, e in seen if e is not None]
    assert [(op, e) for op, _, e in errors if e != "ConditionalCheckFailedException"] == [
        ("PutItem", "ProvisionedThroughputExceededException")
    ]
    assert relay.call_faults == [("PutItem", "throttled")]
    # the other errors are the protocol's own refusals (a lease or checkpoint taken by a conditional write)
    assert all(e == "ConditionalCheckFailedException" for op, _, e in errors if op != "PutItem"), errors
    assert all(0 <= seconds < 30 for _, _, seconds, _ in seen)


def test_a_call_without_an_answer_is_reported_with_the_exception_type(app: str) -> None:
    calls = DynamoDBCalls()
    tables = Tables.for_application(app)
    watch = CallWatch(tables, calls)
    db = client("http://127.0.0.1:9", "dynamodb", retries={"total_max_attempts": 1}, connect_timeout=2)
    watch.attach(db)
    with pytest.raises(botocore.exceptions.EndpointConnectionError) as raised:
        db.describe_table(TableName=tables.metadata)
    with pytest.raises(botocore.exceptions.EndpointConnectionError):
        db.describe_table(TableName="someone-elses")  # not this application's table: not counted
    watch.detach()
    watch.detach()  # idempotent
    assert [(op, table, e) for op, table, _, e in calls.seen] == [
        ("DescribeTable", "metadata", type(raised.value).__name__)
    ]
