"""A lean parser for GetRecords responses, hooked into the Kinesis client kinsumer reads with.

botocore walks every record of a GetRecords response through its shape model and turns each
``ApproximateArrivalTimestamp`` into a datetime in the local time zone through dateutil: that
is most of a reader's CPU time per record, more than the HTTP exchange. :func:`install` adds a
``before-parse`` handler to a client that parses a successful GetRecords body in one pass and
hands botocore an empty body to finish with. The result has botocore's structure: ``Data``
as bytes, the arrival timestamp as an aware datetime (in UTC rather than local time: the same
instant). Error responses, other operations and any body this parser does not recognise
(another protocol, a field of an unexpected type) are left to botocore untouched.

The handler parses only the calls made through :func:`get_records`: a client the user passed
in, and shares with code of their own, answers that code exactly as it did before.
"""

from __future__ import annotations

import binascii
import datetime as dt
import json
import threading
from typing import Any

__all__ = ["convert_records", "get_records", "install", "parse_body", "parse_get_records"]

_EVENT = "before-parse.kinesis.GetRecords"
_UNIQUE_ID = "kinsumer.records_parser"
_UTC = dt.UTC
_EMPTY_BODY = b"{}"
_calling = threading.local()  # .ours: this thread is in get_records()


def install(kinesis: Any) -> bool:
    """Register the parser on a boto3 Kinesis client (once). False if it has no event system.

    It parses the calls made through :func:`get_records` only; the client's other callers
    get botocore's parse, as without it.
    """
    events = getattr(getattr(kinesis, "meta", None), "events", None)
    if events is None:
        return False
    events.register(_EVENT, _parse_ours, unique_id=_UNIQUE_ID)
    return True


def get_records(kinesis: Any, **params: Any) -> dict[str, Any]:
    """GetRecords with ``params`` through botocore, parsed by this parser if :func:`install` ran on the client."""
    _calling.ours = True
    try:
        return kinesis.get_records(**params)  # type: ignore[no-any-return]
    finally:
        _calling.ours = False


def _parse_ours(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    if getattr(_calling, "ours", False):
        parse_get_records(response_dict, customized_response_dict)


def parse_get_records(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> None:
    """botocore's ``before-parse`` hook: parse a 200 GetRecords JSON body ourselves."""
    if response_dict.get("status_code") != 200:
        return
    body = response_dict.get("body")
    if not isinstance(body, bytes | bytearray):
        return
    parsed, ok = parse_body(body)
    if not ok:
        return  # not the shape we expect: botocore parses it (and reports what is wrong)
    customized_response_dict.update(parsed)
    response_dict["body"] = _EMPTY_BODY


def parse_body(body: bytes | bytearray) -> tuple[dict[str, Any], bool]:
    """A successful GetRecords body in botocore's shape, and True; False if it is not one this parser knows."""
    if not body.startswith(b"{"):
        return {}, False
    try:
        parsed = json.loads(body)
        convert_records(parsed.get("Records", ()))
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, OverflowError, OSError):
        return {}, False
    if not isinstance(parsed, dict):
        return {}, False
    return parsed, True


def convert_records(records: list[dict[str, Any]]) -> None:
    """Turn each record's fields into botocore's types, in place (the dicts are fresh from json).

    Records written together share their arrival timestamp: one datetime serves a run of them.
    """
    a2b, from_timestamp = binascii.a2b_base64, dt.datetime.fromtimestamp
    last: object = None
    arrival = None
    for record in records:
        record["Data"] = a2b(record["Data"])
        seconds = record["ApproximateArrivalTimestamp"]
        if seconds != last:
            arrival = from_timestamp(seconds, _UTC)  # a TypeError for anything but a number
            last = seconds
        record["ApproximateArrivalTimestamp"] = arrival
