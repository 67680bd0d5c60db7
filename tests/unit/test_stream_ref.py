"""A stream by name or by ARN (:mod:`kinsumer.aws.stream_ref`): what each names in a Kinesis call, in the rows,
and which region reads it; what is refused, and how it says so."""

from __future__ import annotations

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinsumer import ConfigError, Kinsumer
from kinsumer.aws.stream_ref import StreamRef, distinct_names, reading_region, stream_params
from kinsumer.coordination.streams import StreamScope

names = st.from_regex(r"[A-Za-z0-9_.-]{1,128}", fullmatch=True)
partitions = st.sampled_from(["aws", "aws-cn", "aws-us-gov", "aws-iso-b"])
regions = st.sampled_from(["us-east-1", "eu-west-3", "cn-north-1", "us-gov-west-1", "ap-southeast-2", "us-isob-east-1"])
accounts = st.from_regex(r"[0-9]{12}", fullmatch=True)


@given(partitions, regions, accounts, names)
def test_an_arn_is_called_by_arn_and_known_by_the_name_in_it(
    partition: str, region: str, account: str, name: str
) -> None:
    arn = f"arn:{partition}:kinesis:{region}:{account}:stream/{name}"
    ref = StreamRef(arn)
    assert (ref.name, ref.region, ref.account, ref.arn) == (name, region, account, arn)
    assert ref.params() == stream_params(arn) == {"StreamARN": arn}
    scope = StreamScope(ref.name, home=False, arn=arn)
    assert scope.ref == arn
    assert scope.key("shardId-000000000001") == f"{name}/shardId-000000000001"  # one slash: the name's rows


@given(names)
def test_a_name_is_called_by_name_in_the_callers_region(name: str) -> None:
    ref = StreamRef(name)
    assert (ref.name, ref.region, ref.account, ref.arn) == (name, None, None, None)
    assert ref.params() == {"StreamName": name}
    assert StreamScope(name).ref == name


@given(names, regions, accounts)
def test_a_name_and_its_arn_key_the_same_rows(name: str, region: str, account: str) -> None:
    by_arn = StreamRef(f"arn:aws:kinesis:{region}:{account}:stream/{name}")
    by_name = StreamRef(name)
    assert StreamScope(by_arn.name, home=False).key("s") == StreamScope(by_name.name, home=False).key("s")


@pytest.mark.parametrize(
    "given",
    [
        "",
        "a/b",
        "x" * 129,
        "arn:aws:kinesis:us-east-1:123456789012:stream/",
        "arn:aws:kinesis:us-east-1:12345678901:stream/clicks",  # 11 digits
        "arn:aws:kinesis:us-east-1:123456789012:clicks",
        "arn:aws:kinesis:us-east-1:123456789012:stream/clicks/consumer/c:1",  # a consumer's ARN
        "arn:aws:sqs:us-east-1:123456789012:clicks",
        "arn:aws:kinesis::123456789012:stream/clicks",
        "arn:aws:kinesis:us-east-1:123456789012:stream/cl icks",
        "arn:aws:dynamodb:us-east-1:123456789012:table/clicks",
    ],
)
def test_anything_else_is_refused_naming_the_field_and_showing_a_valid_arn(given: str) -> None:
    with pytest.raises(ConfigError) as raised:
        StreamRef(given, field="streamARN")
    assert raised.value.field == "streamARN"
    assert "arn:aws:kinesis:<region>:<12-digit account id>:stream/<name>" in str(raised.value)


def test_the_streams_of_one_client_lie_in_one_region() -> None:
    east = StreamRef("arn:aws:kinesis:us-east-1:111111111111:stream/a")
    west = StreamRef("arn:aws:kinesis:us-west-2:222222222222:stream/b")
    assert reading_region([StreamRef("a")], "eu-west-1") is None  # names only: the configured region
    assert reading_region([west], "us-east-1") == "us-west-2"  # the ARN's, whatever the caller's
    assert reading_region([StreamRef("a"), west], "us-west-2") == "us-west-2"
    with pytest.raises(ConfigError, match=r"several regions .*us-east-1, us-west-2"):
        reading_region([east, west], "us-east-1")
    with pytest.raises(ConfigError, match=r"gives c by name, so in the configured region us-east-1.*give every stream"):
        reading_region([StreamRef("c"), west], "us-east-1")


def test_two_streams_of_one_name_are_refused() -> None:
    theirs = StreamRef("arn:aws:kinesis:us-east-1:222222222222:stream/clicks")
    distinct_names([theirs, StreamRef("views")])
    with pytest.raises(ConfigError, match=r"lists the stream clicks more than once .*share their checkpoints"):
        distinct_names([StreamRef("clicks"), theirs])


def test_kinsumer_makes_its_kinesis_client_in_the_arns_region_and_dynamodb_in_the_callers() -> None:
    arn = "arn:aws:kinesis:eu-west-3:222222222222:stream/clicks"
    k = Kinsumer(arn, "app", "c", session=boto3.Session(region_name="us-east-1"))
    assert k.streams == ("clicks",) and k.stream_name == "clicks"
    assert k._kinesis.meta.region_name == "eu-west-3"
    assert k._dynamodb.meta.region_name == "us-east-1"


def test_kinsumer_refuses_a_kinesis_client_of_another_region_than_the_arns() -> None:
    arn = "arn:aws:kinesis:eu-west-3:222222222222:stream/clicks"
    client = boto3.client("kinesis", region_name="us-east-1")
    with pytest.raises(ConfigError, match=r"kinesis is a client of region us-east-1.*region_name='eu-west-3'"):
        Kinsumer(arn, "app", "c", kinesis=client, dynamodb=boto3.client("dynamodb", region_name="us-east-1"))
    Kinsumer(arn, "app", "c", kinesis=boto3.client("kinesis", region_name="eu-west-3"),
             dynamodb=boto3.client("dynamodb", region_name="us-east-1"))  # fmt: skip


def test_kinsumer_refuses_a_malformed_arn_and_two_streams_of_one_name() -> None:
    with pytest.raises(ConfigError, match=r"stream_name must be a stream name .* or a stream ARN"):
        Kinsumer("arn:aws:kinesis:us-east-1:123:stream/clicks", "app", "c")
    with pytest.raises(ConfigError, match="more than once"):
        Kinsumer(["clicks", "arn:aws:kinesis:us-east-1:123456789012:stream/clicks"], "app", "c")
    with pytest.raises(ConfigError, match="more than once"):
        Kinsumer(["clicks", "clicks"], "app", "c")
