"""kinsumer's own GetRecords (kinsumer/aws/lean_get_records.py) against real servers: the same
answers and errors as botocore's, its signature botocore's, and faults on the wire retried."""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from demo.servers import LocalServer, client
from kinsumer.aws import lean_get_records, records_parser
from kinsumer.aws.error_codes import is_transient, unreached
from kinsumer.aws.lean_get_records import LeanGetRecords, lean_for
from kinsumer.reading.polling import PollingReader
from kinsumer.reading.position import StartPosition
from kinsumer.reading.reader import ReaderSettings
from tests.relay import KinesisRelay
from tests.reshard import new_stream
from tests.support.tls import Authority, TlsRelay

pytestmark = pytest.mark.server

SHARD = "shardId-000000000000"


def iterator(kinesis: Any, stream: str) -> str:
    return str(kinesis.get_shard_iterator(StreamName=stream, ShardId=SHARD, ShardIteratorType="TRIM_HORIZON")
               ["ShardIterator"])  # fmt: skip


@pytest.mark.parametrize("server", ["kinesalite", "moto_server"])
def test_it_answers_as_botocore_does(server: str, request: pytest.FixtureRequest) -> None:
    local: LocalServer = request.getfixturevalue(server)
    kinesis = local.client("kinesis")
    stream = new_stream(kinesis, 1)
    payloads = [b"", b"\x00\xff binary", json.dumps({"id": 1}).encode(), bytes(range(256)) * 40]
    for i, data in enumerate(payloads):
        kinesis.put_record(StreamName=stream, Data=data, PartitionKey=f"key-{i}")
    lean = lean_for(kinesis)
    assert lean is not None
    ours = lean.get_records(iterator(kinesis, stream), 3)
    theirs = records_parser.get_records(kinesis, ShardIterator=iterator(kinesis, stream), Limit=3)
    fields = ("Data", "PartitionKey", "SequenceNumber", "ApproximateArrivalTimestamp")
    assert [[r[f] for f in fields] for r in ours["Records"]] == [[r[f] for f in fields] for r in theirs["Records"]]
    assert [r["Data"] for r in ours["Records"]] == payloads[:3]
    assert ours.get("MillisBehindLatest") == theirs.get("MillisBehindLatest")
    rest = lean.get_records(ours["NextShardIterator"], 10)  # its iterator goes on where the page ended
    assert [r["Data"] for r in rest["Records"]] == payloads[3:]
    with pytest.raises(botocore.exceptions.ClientError) as lean_error:
        lean.get_records("not-an-iterator" * 5, 10)
    with pytest.raises(botocore.exceptions.ClientError) as botocore_error:
        records_parser.get_records(kinesis, ShardIterator="not-an-iterator" * 5, Limit=10)
    assert lean_error.value.response["Error"]["Code"] == botocore_error.value.response["Error"]["Code"]
    status = lean_error.value.response["ResponseMetadata"]["HTTPStatusCode"]
    assert status == botocore_error.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_its_signature_is_botocores(moto_server: LocalServer) -> None:
    kinesis = moto_server.client("kinesis")
    lean = LeanGetRecords.of(kinesis)
    assert lean is not None
    body = json.dumps({"ShardIterator": "abc", "Limit": 5}).encode()
    ours = lean.endpoint.signed_headers("GetRecords", body)
    request = AWSRequest("POST", moto_server.endpoint + "/", data=body, headers={
        "Content-Type": ours["Content-Type"], "X-Amz-Target": ours["X-Amz-Target"], "X-Amz-Date": ours["X-Amz-Date"],
    })  # fmt: skip
    request.context["timestamp"] = ours["X-Amz-Date"]
    credentials = kinesis._request_signer._credentials.get_frozen_credentials()
    auth = SigV4Auth(credentials, "kinesis", kinesis.meta.region_name)
    canonical = auth.canonical_request(request)
    signature = auth.signature(auth.string_to_sign(request, canonical), request)
    assert ours["Authorization"].endswith(f"Signature={signature}")
    assert f"SignedHeaders={auth.signed_headers(auth.headers_to_sign(request))}," in ours["Authorization"]


def test_a_client_with_hooks_of_its_own_is_left_to_botocore(kinesalite: LocalServer) -> None:
    kinesis = kinesalite.client("kinesis")
    seen: list[str] = []
    kinesis.meta.events.register("before-call.kinesis.GetRecords", lambda **_: seen.append("hook"))
    stream = new_stream(kinesis, 1)
    assert lean_for(kinesis) is None
    lean_get_records.get_records(kinesis, iterator(kinesis, stream), 10)
    assert seen == ["hook"]  # the user's hook saw the call, as it would without kinsumer


@pytest.mark.parametrize("fault", ["throttled", "5xx", "503", "cut"])
def test_faults_on_the_wire_are_retried_and_nothing_is_lost(kinesalite: LocalServer, fault: str) -> None:
    kinesis = kinesalite.client("kinesis")
    stream = new_stream(kinesis, 1)
    written = [f"r{i}".encode() for i in range(30)]
    for data in written:
        kinesis.put_record(StreamName=stream, Data=data, PartitionKey="k")
    with KinesisRelay(kinesalite.endpoint, get_records_fault=lambda n: fault if n % 2 else None) as relay:
        through = client(relay.endpoint, "kinesis")
        assert lean_for(through) is not None
        reader = PollingReader(through, stream, SHARD, StartPosition.trim_horizon(),
                               settings=ReaderSettings(throttle_delay=0.01, max_records_per_call=7))  # fmt: skip
        got: list[bytes] = []
        while len(got) < len(written):
            got += [r.data for r in reader.next_page().records()]
        assert got == written
        assert relay.faults and set(relay.faults) == {fault}


def test_the_page_it_reads_is_the_one_botocore_reads_when_it_is_large(kinesalite: LocalServer) -> None:
    kinesis = kinesalite.client("kinesis")
    stream = new_stream(kinesis, 1)
    for start in range(0, 2000, 500):
        kinesis.put_records(StreamName=stream, Records=[
            {"Data": base64.b64encode(b"%d" % i), "PartitionKey": str(i)} for i in range(start, start + 500)
        ])  # fmt: skip
    lean = lean_for(kinesis)
    assert lean is not None
    page = lean.get_records(iterator(kinesis, stream), 10_000)
    assert len(page["Records"]) == 2000
    assert all(isinstance(r["ApproximateArrivalTimestamp"], dt.datetime) for r in page["Records"])



def tls_client(endpoint: str, verify: str | None = None) -> Any:
    """A Kinesis client of ``endpoint`` trusting the CA file ``verify`` (None: botocore's), one attempt a call."""
    once = botocore.config.Config(retries={"mode": "standard", "total_max_attempts": 1})
    return boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="local",
                        aws_secret_access_key="local", verify=verify, config=once)  # fmt: skip


def test_an_untrusted_certificate_is_botocores_ssl_error_and_a_trusted_one_answers(
    tls: TlsRelay, authority: Authority
) -> None:
    kinesis = tls_client(tls.endpoint)
    lean = lean_for(kinesis)
    assert lean is not None
    with pytest.raises(botocore.exceptions.SSLError) as ours:
        lean.get_records("not-an-iterator" * 5, 10)
    with pytest.raises(botocore.exceptions.SSLError) as theirs:
        records_parser.get_records(kinesis, ShardIterator="not-an-iterator" * 5, Limit=10)
    assert str(ours.value).startswith(f"SSL validation failed for {tls.endpoint}")
    assert "CERTIFICATE_VERIFY_FAILED" in str(ours.value) and "CERTIFICATE_VERIFY_FAILED" in str(theirs.value)
    ours_fault, theirs_fault = unreached(ours.value), unreached(theirs.value)
    assert ours_fault is not None and theirs_fault is not None and ours_fault.reason == theirs_fault.reason
    assert is_transient(ours.value) and is_transient(theirs.value)  # retried alike: a running reader reads through
    trusted = tls_client(tls.endpoint, verify=str(authority.ca))
    lean = lean_for(trusted)
    assert lean is not None
    with pytest.raises(botocore.exceptions.ClientError) as ours_answered:  # through TLS: the server's answer
        lean.get_records("not-an-iterator" * 5, 10)
    with pytest.raises(botocore.exceptions.ClientError) as theirs_answered:
        records_parser.get_records(trusted, ShardIterator="not-an-iterator" * 5, Limit=10)
    assert ours_answered.value.response["Error"]["Code"] == theirs_answered.value.response["Error"]["Code"]
