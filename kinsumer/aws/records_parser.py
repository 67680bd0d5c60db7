"""A lean parser for GetRecords responses, hooked into the Kinesis client kinsumer reads with.

botocore walks every record of a GetRecords response through its shape model and turns each
``ApproximateArrivalTimestamp`` into a datetime in the local time zone through dateutil: that
is most of a reader's CPU time per record, more than the HTTP exchange. :func:`install` adds a
``before-parse`` handler to a client that parses a successful GetRecords body in one pass and
hands botocore an empty body to finish with. The result has botocore's structure: ``Data``
as bytes, the arrival timestamp as an aware datetime (in UTC rather than local time: the same
instant). Error responses, other operations and any body this parser does not recognise
(another protocol, a field of an unexpected type) are left to botocore untouched.
"""

from __future__ import annotations

import binascii
import datetime as dt
import json
from typing import Any

__all__ = ["install", "parse_get_records"]

_EVENT = "before-parse.kinesis.GetRecords"
_UNIQUE_ID = "kinsumer.records_parser"
_UTC = dt.UTC
_EMPTY_BODY = b"{}"


def install(kinesis: Any) -> bool:
    """Register the parser on a boto3 Kinesis client (once). False if it has no event system."""
    events = getattr(getattr(kinesis, "meta", None), "events", None)
    if events is None:
        return False
    events.register(_EVENT, parse_get_records, unique_id=_UNIQUE_ID)
    return True


def parse_get_records(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    """botocore's ``before-parse`` hook: parse a 200 GetRecords JSON body ourselves."""
    if response_dict.get("status_code") != 200:
        return
    body = response_dict.get("body")
    if not isinstance(body, bytes | bytearray) or not body.startswith(b"{"):
        return
    try:
        parsed = json.loads(body)
        parsed["Records"] = [_record(r) for r in parsed.get("Records", ())]
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, OverflowError, OSError):
        return  # not the shape we expect: botocore parses it (and reports what is wrong)
    customized_response_dict.update(parsed)
    response_dict["body"] = _EMPTY_BODY


def _record(raw: dict[str, Any]) -> dict[str, Any]:
    arrival = raw["ApproximateArrivalTimestamp"]
    if not isinstance(arrival, int | float):
        raise TypeError(arrival)
    record = {
        "SequenceNumber": raw["SequenceNumber"],
        "ApproximateArrivalTimestamp": dt.datetime.fromtimestamp(arrival, _UTC),
        "Data": binascii.a2b_base64(raw["Data"]),
        "PartitionKey": raw["PartitionKey"],
    }
    if "EncryptionType" in raw:
        record["EncryptionType"] = raw["EncryptionType"]
    return record
