"""Loaded by every Python process Spark starts for the tests (PYTHONPATH): logs each AWS call
(botocore's, and the GetRecords and SubscribeToShard kinsumer sends itself).

One line per call to $KINSUMER_TEST_CALL_LOG: ``pid operation parent-command limit`` (the
``Limit`` parameter of a GetRecords call, else ``-``), so a test
can tell the driver's Python processes from the executors' workers (children of
pyspark.daemon).
"""

import os

_LOG = os.environ.get("KINSUMER_TEST_CALL_LOG")

if _LOG:
    import botocore.client

    _original = botocore.client.BaseClient._make_api_call

    def _logged(self, operation_name, api_params):  # type: ignore[no-untyped-def]
        _logged_only(operation_name, api_params if operation_name == "GetRecords" else {})
        return _original(self, operation_name, api_params)

    botocore.client.BaseClient._make_api_call = _logged

    # kinsumer sends most GetRecords itself (kinsumer/aws/lean_get_records.py): logged the same way
    import kinsumer.aws.lean_get_records as _lean

    _lean_get_records = _lean.LeanGetRecords.get_records

    def _lean_logged(self, shard_iterator, limit, stream_arn=None):  # type: ignore[no-untyped-def]
        _logged_only("GetRecords", {"Limit": limit})
        return _lean_get_records(self, shard_iterator, limit, stream_arn)

    def _logged_only(operation_name, api_params):  # type: ignore[no-untyped-def]
        try:
            with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
                parent = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            parent = "?"
        with open(_LOG, "a") as f:
            f.write(f"{os.getpid()} {operation_name} {parent.replace(' ', '_')} {api_params.get('Limit', '-')}\n")

    _lean.LeanGetRecords.get_records = _lean_logged

    # and its subscriptions too (kinsumer/aws/subscription_http.py): each request made is one call
    import kinsumer.aws.subscription_http as _subscription_http

    _subscription_request = _subscription_http.LeanSubscriber.request

    def _subscription_logged(self, params):  # type: ignore[no-untyped-def]
        _logged_only("SubscribeToShard", {})
        return _subscription_request(self, params)

    _subscription_http.LeanSubscriber.request = _subscription_logged

# kinsumer's warnings (and worse) also go to $KINSUMER_TEST_WARNINGS, one line each, so a test can
# see what the driver's Python process logged (they still go to stderr, as without a handler)
_WARNINGS = os.environ.get("KINSUMER_TEST_WARNINGS")

if _WARNINGS:
    import logging as _logging
    import sys as _sys

    _kinsumer_log = _logging.getLogger("kinsumer")
    for _handler in (_logging.FileHandler(_WARNINGS), _logging.StreamHandler(_sys.stderr)):
        _handler.setLevel(_logging.WARNING)
        _handler.setFormatter(_logging.Formatter("%(process)d %(levelname)s %(name)s %(message)s"))
        _kinsumer_log.addHandler(_handler)
