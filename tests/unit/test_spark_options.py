"""The Spark source's options: names, aliases, checks. Pure, no Spark."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")  # the package kinsumer.spark imports it

from kinsumer import ConfigError
from kinsumer.spark.options import OPTIONS, Role, SourceOptions, duration

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "": 1e-3}


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({}, "option streamName"),
        ({"streamName": "s", "initialPosition": "NEWEST"}, "option startingPosition"),
        ({"streamName": "s", "startingPosition": "AT_TIMESTAMP"}, "option atTimestamp"),
        ({"streamName": "s", "initialPosition": "AT_TIMESTAMP", "atTimestamp": "yesterday"}, "option atTimestamp"),
        ({"streamName": "s", "startingPosition": "LATEST", "atTimestamp": "2026-01-01"}, "option atTimestamp"),
        ({"streamName": "s", "maxRecordsPerShard": "0"}, "option maxRecordsPerShard"),
        ({"streamName": "s", "maxRecordsPerShard": "many"}, "option maxRecordsPerShard"),
        ({"streamName": "s", "maxRecordsPerShard": "2.5"}, "option maxRecordsPerShard"),
        ({"streamName": "s", "maxRecordsPerTrigger": "0"}, "option maxRecordsPerTrigger"),
        ({"streamName": "s", "idleBatchInterval": "-1"}, "option idleBatchInterval"),
        ({"streamName": "s", "shardsPerTask": "0"}, "option shardsPerTask"),
        ({"streamName": "s", "shardsPerTask": "1.5"}, "option shardsPerTask"),
        ({"streamName": "s", "maxRecordPerShard": "5"}, "option maxRecordPerShard"),
        ({"streamName": "s", "kinesis.awsAccessKeyId": "AKIA"}, "option kinesis.awsAccessKeyId"),
        ({"streamName": "s", "kinesis.streamName": "t"}, "option streamName"),
        ({"streamName": "s", "metadataPath": "hdfs://nn/ckpt/ledger"}, "option metadataPath"),
        ({"streamName": "s", "metadataPath": "s3:///no-bucket"}, "option metadataPath"),
        ({"streamName": "s", "metadataPath": "/ckpt", "dynamodbEndpointUrl": "http://x"}, "option dynamodbEndpointUrl"),
        ({"streamName": "s", "consumerType": "EFO"}, "option consumerType"),
        ({"streamName": "s", "kinesis.consumerType": "SubscribeToShard"}, "option consumerName"),
        ({"streamName": "s", "consumerType": "GetRecords", "consumerName": "c"}, "option consumerName"),
        ({"streamName": "s", "consumerName": " "}, "option consumerName"),
        ({"streamName": "a,,b"}, "option streamName"),
        ({"streamName": "a,b,a"}, "option streamName"),
        ({"streamName": "a,b c"}, "option streamName"),
        ({"streamName": " , "}, "option streamName"),
        ({"streamName": "a", "streamNames": "a,b"}, "option streamName"),
        ({"streamName": "a", "dropRemovedStreams": "yes"}, "option dropRemovedStreams"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as info:
        SourceOptions.from_options(options)
    assert info.value.field == name


def test_a_misspelled_option_is_an_error_that_suggests_the_name_and_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        SourceOptions.from_options({"streamname": "s", "maxrecordpershard": "5"})
    message = str(info.value)
    assert "did you mean maxRecordsPerShard?" in message
    assert all(name in message for name in OPTIONS)


def test_credentials_in_options_are_refused_and_their_value_is_not_repeated() -> None:
    with pytest.raises(ConfigError, match="standard AWS chain") as info:
        SourceOptions.from_options({"streamName": "s", "kinesis.awsSecretKey": "shh"})
    assert info.value.field == "option kinesis.awsSecretKey"
    assert "shh" not in str(info.value)


def test_options_arrive_lower_cased_and_have_defaults() -> None:
    opts = SourceOptions.from_options(
        {"streamname": "clicks", "initialposition": "at_timestamp", "attimestamp": "2026-01-02T03:04:05"}
    )
    assert opts.stream == "clicks"
    assert opts.initial_position == "AT_TIMESTAMP"
    assert opts.at_timestamp == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert opts.table == "kinsumer-spark-clicks_metadata"
    assert (opts.max_records_per_shard, opts.max_records_per_trigger) == (100_000, None)
    assert opts.shards_per_task == 4
    assert SourceOptions.from_options({"streamname": "s", "shardspertask": "1"}).shards_per_task == 1


def test_spark_sql_kinesis_connector_names_mean_the_same() -> None:
    opts = SourceOptions.from_options(
        {
            "kinesis.streamname": "clicks",
            "kinesis.region": "eu-west-1",
            "kinesis.endpointurl": "http://127.0.0.1:1",
            "kinesis.startingposition": "AT_TIMESTAMP 2026-01-02T03:04:05Z",
            "kinesis.maxfetchrecordspershard": "500",
            "kinesis.maxfetchtimepershardsec": "3",
            "kinesis.metadatapath": "s3://bucket/ckpt/ledger",
        }
    )
    assert opts.metadata_path == "s3://bucket/ckpt/ledger"
    assert (opts.stream, opts.region, opts.endpoint_url) == ("clicks", "eu-west-1", "http://127.0.0.1:1")
    assert opts.at_timestamp == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert (opts.max_records_per_shard, opts.read_time_budget) == (500, 3.0)
    assert SourceOptions.from_options({"streamName": "s", "startingPosition": "earliest"}).initial_position == (
        "TRIM_HORIZON"
    )
    same = {"streamName": "s", "kinesis.streamName": "s", "maxRecordsPerTrigger": "7"}
    assert SourceOptions.from_options(same).max_records_per_trigger == 7  # an alias with the same value is fine


def test_a_batch_read_refuses_the_options_only_a_stream_uses() -> None:
    with pytest.raises(ConfigError, match="batch read ignores it") as info:
        SourceOptions.from_options({"streamName": "s", "maxRecordsPerTrigger": "5"}, batch=True)
    assert info.value.field == "option maxRecordsPerTrigger"
    assert SourceOptions.from_options({"streamName": "s", "startingPosition": "EARLIEST"}, batch=True).stream == "s"


def test_enhanced_fan_out_is_chosen_by_a_consumer_name_in_our_names_or_the_aws_connectors() -> None:
    assert SourceOptions.from_options({"streamName": "s"}).consumer_name is None
    assert SourceOptions.from_options({"streamname": "s", "consumername": "c"}).consumer_name == "c"
    aws = {"kinesis.streamName": "s", "kinesis.consumerType": "SubscribeToShard", "kinesis.consumerName": "c"}
    assert SourceOptions.from_options({k.lower(): v for k, v in aws.items()}).consumer_name == "c"
    assert SourceOptions.from_options({"streamName": "s", "consumerType": "getrecords"}).consumer_name is None


def test_a_batch_read_reads_with_get_records_and_says_so_when_asked_for_fan_out() -> None:
    assert SourceOptions.from_options({"streamName": "s", "consumerType": "GetRecords"}, batch=True)
    for extra in ({"consumerName": "c"}, {"consumerType": "SubscribeToShard", "consumerName": "c"}):
        with pytest.raises(ConfigError, match="streaming reads"):
            SourceOptions.from_options({"streamName": "s", **extra}, batch=True)


def test_a_role_is_taken_under_our_names_and_the_aws_connectors() -> None:
    arn = "arn:aws:iam::123456789012:role/reader"
    ours = SourceOptions.from_options({"streamName": "s", "roleArn": arn, "externalId": "ext-1"})
    theirs = SourceOptions.from_options({
        "kinesis.streamName": "s", "kinesis.stsRoleArn": arn, "kinesis.stsSessionName": "etl",
        "kinesis.stsEndpointUrl": "https://sts.eu-west-1.amazonaws.com",
    })  # fmt: skip
    assert ours.role == Role(arn, "kinsumer-spark", "ext-1", None)
    assert theirs.role == Role(arn, "etl", None, "https://sts.eu-west-1.amazonaws.com")
    assert SourceOptions.from_options({"streamName": "s"}).role is None
    with pytest.raises(ConfigError, match=r"option roleArn must be None or an IAM role ARN"):
        SourceOptions.from_options({"streamName": "s", "roleArn": "reader"})
    with pytest.raises(ConfigError, match=r"option externalId goes with roleArn"):
        SourceOptions.from_options({"streamName": "s", "externalId": "ext-1"})


def test_several_streams_are_a_comma_separated_list_under_either_name_and_the_first_names_the_ledger() -> None:
    for key in ("streamName", "streamNames", "kinesis.streamName"):
        opts = SourceOptions.from_options({key.lower(): " clicks, views ,orders"})
        assert opts.streams == ("clicks", "views", "orders")
        assert opts.stream == "clicks" and opts.table == "kinsumer-spark-clicks_metadata"
        assert not opts.drop_removed_streams
    assert SourceOptions.from_options({"streamName": "a"}).streams == ("a",)
    assert SourceOptions.from_options({"streamName": "a,b", "dropRemovedStreams": "TRUE"}).drop_removed_streams
    with pytest.raises(ConfigError, match="streaming reads"):
        SourceOptions.from_options({"streamName": "a", "dropRemovedStreams": "true"}, batch=True)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900.0), ("30s", 30.0), ("500ms", 0.5), ("1h", 3600.0), ("2min", 120.0), ("1d", 86400.0),
     ("250us", 0.00025), (" 3S ", 3.0), ("1500", 1.5), ("0s", 0.0)],
)  # fmt: skip
def test_max_trigger_delay_is_a_duration_as_spark_writes_them(text: str, seconds: float) -> None:
    opts = SourceOptions.from_options({"streamName": "s", "minRecordsPerTrigger": "10", "maxTriggerDelay": text})
    assert opts.max_trigger_delay == pytest.approx(seconds)  # a bare number is milliseconds, as in Kafka's


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(sorted(_UNITS)))
def test_any_whole_number_with_a_unit_is_that_many_of_the_unit(value: int, unit: str) -> None:
    assert duration("maxTriggerDelay", f"{value}{unit}", 0) == pytest.approx(value * _UNITS[unit])


@pytest.mark.parametrize("text", ["", "m", "1.5s", "15 minutes", "-1s", "1w", "ten"])
def test_a_malformed_max_trigger_delay_is_an_error_even_without_a_minimum(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        SourceOptions.from_options({"streamName": "s", "maxTriggerDelay": text})
    assert info.value.field == "option maxTriggerDelay"


def test_min_records_per_trigger_is_a_whole_number_no_larger_than_the_maximum() -> None:
    opts = SourceOptions.from_options({"streamname": "s", "minrecordspertrigger": "500"})
    assert (opts.min_records_per_trigger, opts.max_trigger_delay) == (500, 900.0)  # Kafka's default delay: 15m
    assert SourceOptions.from_options({"streamName": "s"}).min_records_per_trigger is None
    both = {"streamName": "s", "minRecordsPerTrigger": "50", "maxRecordsPerTrigger": "50"}
    assert SourceOptions.from_options(both).min_records_per_trigger == 50
    for bad in ("0", "2.5", "some"):
        with pytest.raises(ConfigError) as info:
            SourceOptions.from_options({"streamName": "s", "minRecordsPerTrigger": bad})
        assert info.value.field == "option minRecordsPerTrigger"
    with pytest.raises(ConfigError, match=r"must be <= maxRecordsPerTrigger \(50\)"):
        SourceOptions.from_options({**both, "minRecordsPerTrigger": "51"})


def test_max_trigger_delay_without_a_minimum_has_no_effect_as_in_kafkas_source() -> None:
    opts = SourceOptions.from_options({"streamName": "s", "maxTriggerDelay": "30s"})
    assert (opts.min_records_per_trigger, opts.max_trigger_delay) == (None, 30.0)


def test_a_batch_read_refuses_the_trigger_options() -> None:
    for name, value in (("minRecordsPerTrigger", "5"), ("maxTriggerDelay", "5s")):
        with pytest.raises(ConfigError, match="batch read ignores it") as info:
            SourceOptions.from_options({"streamName": "s", name: value}, batch=True)
        assert info.value.field == f"option {name}"


@pytest.mark.parametrize(
    ("options", "fail"),
    [
        ({}, True),
        ({"failOnDataLoss": "false"}, False),
        ({"failondataloss": "TRUE"}, True),
        ({"kinesis.failOnDataLoss": "False"}, False),
    ],
)
def test_fail_on_data_loss_is_true_by_default_and_takes_aws_connectors_name(
    options: dict[str, str], fail: bool
) -> None:
    assert SourceOptions.from_options({"streamName": "s", **options}).fail_on_data_loss is fail


def test_fail_on_data_loss_is_a_boolean_and_not_for_batch_reads() -> None:
    with pytest.raises(ConfigError, match="option failOnDataLoss must be true or false"):
        SourceOptions.from_options({"streamName": "s", "failOnDataLoss": "sometimes"})
    with pytest.raises(ConfigError, match="option failOnDataLoss is for streaming reads"):
        SourceOptions.from_options({"streamName": "s", "failOnDataLoss": "false"}, batch=True)


_ARN = "arn:aws:kinesis:eu-west-3:222222222222:stream/clicks"


def test_streamarn_reads_a_stream_by_arn_known_by_its_name_with_kinesis_in_the_arns_region() -> None:
    opts = SourceOptions.from_options({"streamarn": _ARN, "region": "us-east-1"})
    assert (opts.stream, opts.streams, opts.stream_arns) == ("clicks", ("clicks",), (_ARN,))
    assert opts.ref("clicks") == _ARN and opts.kinesis_region == "eu-west-3" and opts.region == "us-east-1"
    assert opts.application_name == "kinsumer-spark-clicks"  # the ledger table is named after the name
    both = SourceOptions.from_options({"streamName": "views", "streamARN": _ARN.replace("clicks", "c2") + f",{_ARN}"})
    assert both.streams == ("views", "c2", "clicks") and both.ref("views") == "views"
    assert SourceOptions.from_options({"streamName": "views"}).kinesis_region is None  # the standard chain's


@pytest.mark.parametrize(
    ("options", "rule"),
    [
        ({"streamARN": "clicks"}, "must hold stream ARNs"),
        ({"streamARN": "arn:aws:kinesis:eu-west-3:2222:stream/clicks"}, "12-digit account id"),
        ({"streamARN": f"{_ARN},"}, "an empty stream"),
        ({"streamName": "clicks", "streamARN": _ARN}, "lists the stream clicks more than once"),
        ({"streamARN": f"{_ARN},{_ARN.replace('eu-west-3', 'us-east-1').replace('clicks', 'c2')}"}, "several regions"),
        ({"streamName": "views", "streamARN": _ARN, "region": "us-east-1"}, "give every stream by its ARN"),
    ],
)
def test_streamarn_refuses_what_is_not_one_region_of_arns_of_distinct_names(options: dict[str, str], rule: str) -> None:
    with pytest.raises(ConfigError, match=rule) as raised:
        SourceOptions.from_options(options)
    assert raised.value.field in ("option streamARN", "option streamName")


def test_the_sink_writes_to_a_stream_by_arn_in_its_region() -> None:
    from kinsumer.spark.sink_options import SinkOptions

    opts = SinkOptions.from_options({"streamARN": _ARN, "region": "us-east-1"})
    assert (opts.stream, opts.region) == (_ARN, "eu-west-3")
    with pytest.raises(ConfigError, match="give one of them"):
        SinkOptions.from_options({"streamARN": _ARN, "streamName": "clicks"})
    with pytest.raises(ConfigError, match="must be a stream ARN"):
        SinkOptions.from_options({"streamARN": "clicks"})
