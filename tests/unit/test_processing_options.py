"""process*()'s options, written once: the TypedDicts the calls take, the defaults in Options, the checks."""

from __future__ import annotations

import inspect
import typing

import attrs
import pytest

from kinsumer import ConfigError, Kinsumer
from kinsumer.handling.options import BATCH_DEFAULTS, BatchOptions, Options, ProcessOptions
from kinsumer.processing import Processing


def test_the_calls_options_are_options_fields_and_the_batches_two_more() -> None:
    fields = set(attrs.fields_dict(Options))
    single = set(typing.get_type_hints(ProcessOptions))
    batch = set(typing.get_type_hints(BatchOptions))
    assert batch == fields and single == fields - {"max_records", "max_wait"} and set(BATCH_DEFAULTS) == batch - single
    for call in (Kinsumer.process, Kinsumer.aprocess, Kinsumer.process_batches, Kinsumer.aprocess_batches):
        kinds = {p.kind.name for name, p in inspect.signature(call).parameters.items() if name != "self"}
        assert kinds == {"POSITIONAL_OR_KEYWORD", "VAR_KEYWORD"}, call  # handler, **options


def test_defaults_come_from_options_and_the_batch_calls_own() -> None:
    assert Processing.options({}, batches=False) == Options()
    assert Processing.options({}, batches=True) == Options(max_records=100, max_wait=1.0)
    given = Processing.options({"max_attempts": 5, "max_records": 7}, batches=True)
    assert (given.max_attempts, given.max_records, given.max_wait) == (5, 7, 1.0)


@pytest.mark.parametrize(
    ("given", "batches", "named"),
    [
        ({"max_atempts": 5}, False, "max_atempts"),  # a typo
        ({"max_records": 10}, False, "max_records"),  # a batch call's option
        ({"retries": 2}, True, "retries"),
        ({"max_attempts": 0}, False, "max_attempts"),  # a wrong value: Options' own check
    ],
)
def test_a_wrong_option_is_a_config_error_naming_it(given: dict[str, object], batches: bool, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Processing.options(given, batches=batches)  # type: ignore[arg-type]


def test_a_handler_must_fit_its_call() -> None:
    async def coroutine(record: object) -> None:
        pass

    with pytest.raises(ConfigError, match="must be a callable taking a record list"):
        Processing.check_handler("not callable", batches=True, called="process_batches()")
    with pytest.raises(ConfigError, match=r"must be an async function .* goes to process\(\)"):
        Processing.check_handler(lambda record: None, batches=False, called="aprocess()")
    Processing.check_handler(coroutine, batches=False, called="aprocess()")
    Processing.check_handler(print, batches=False, called="process()")
