"""Loaded by every Python process Spark starts for the tests (PYTHONPATH): has it import pyspark compiled,
and logs each AWS call (botocore's, and the GetRecords and SubscribeToShard kinsumer sends itself).

One line per call to $KINSUMER_TEST_CALL_LOG: ``pid operation parent-command limit`` (the
``Limit`` parameter of a GetRecords call, else ``-``), so a test
can tell the driver's Python processes from the executors' workers (children of
pyspark.daemon).

Each module is wrapped as it is first imported, not here: a Python worker Spark starts must connect
back to the JVM within 10 s (hard-coded in PythonWorkerFactory.createSimpleWorker; the source's
python_streaming_source_runner is one, for each query started), and importing botocore and kinsumer
here took 0.35 s of CPU in each, as much again as the worker's own imports, all before it connects.
"""

import os
import sys

# Spark puts its own pyspark.zip and py4j's zip first on each Python process's path, and a zip holds no
# compiled module: each process compiled pyspark's modules anew (0.3 s of CPU in each daemon and its worker,
# 0.7 s in each query's planner, over a run of the suite). The same pyspark is installed here, compiled: the
# zips go after it.
_ZIPS = [p for p in sys.path if os.path.basename(p) == "pyspark.zip" or os.path.basename(p).startswith("py4j-")]
if _ZIPS and any(os.path.isdir(os.path.join(p, "pyspark")) for p in sys.path if p not in _ZIPS):
    sys.path[:] = [p for p in sys.path if p not in _ZIPS] + _ZIPS

_LOG = os.environ.get("KINSUMER_TEST_CALL_LOG")

if _LOG:
    import importlib.abc
    import importlib.machinery

    def _logged_only(operation_name, api_params):  # type: ignore[no-untyped-def]
        try:
            with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
                parent = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            parent = "?"
        with open(_LOG, "a") as f:
            f.write(f"{os.getpid()} {operation_name} {parent.replace(' ', '_')} {api_params.get('Limit', '-')}\n")

    def _wrap_botocore(module):  # type: ignore[no-untyped-def]
        original = module.BaseClient._make_api_call

        def _logged(self, operation_name, api_params):  # type: ignore[no-untyped-def]
            _logged_only(operation_name, api_params if operation_name == "GetRecords" else {})
            return original(self, operation_name, api_params)

        module.BaseClient._make_api_call = _logged

    # kinsumer sends most GetRecords itself (kinsumer/aws/lean_get_records.py): logged the same way
    def _wrap_lean_get_records(module):  # type: ignore[no-untyped-def]
        original = module.LeanGetRecords.get_records

        def _lean_logged(self, shard_iterator, limit, stream_arn=None):  # type: ignore[no-untyped-def]
            _logged_only("GetRecords", {"Limit": limit})
            return original(self, shard_iterator, limit, stream_arn)

        module.LeanGetRecords.get_records = _lean_logged

    # and its subscriptions too (kinsumer/aws/subscription_http.py): each request made is one call
    def _wrap_subscription_http(module):  # type: ignore[no-untyped-def]
        original = module.LeanSubscriber.request

        def _subscription_logged(self, params):  # type: ignore[no-untyped-def]
            _logged_only("SubscribeToShard", {})
            return original(self, params)

        module.LeanSubscriber.request = _subscription_logged

    _WRAPS = {
        "botocore.client": _wrap_botocore,
        "kinsumer.aws.lean_get_records": _wrap_lean_get_records,
        "kinsumer.aws.subscription_http": _wrap_subscription_http,
    }

    class _WrapOnImport(importlib.abc.MetaPathFinder):
        """Finds the modules of _WRAPS as the path finder does; each is wrapped once its loader has run it."""

        def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
            wrap = _WRAPS.get(name)
            if wrap is None:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_wrap(module):  # type: ignore[no-untyped-def]
                exec_module(module)
                wrap(module)

            spec.loader.exec_module = exec_and_wrap  # this spec's own loader (one per found module)
            return spec

    for _name, _wrap in _WRAPS.items():  # imported before this ran (none is, at start-up): wrapped at once
        if _name in sys.modules:
            _wrap(sys.modules[_name])
    sys.meta_path.insert(0, _WrapOnImport())

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
