"""tests/sim's in-memory DynamoDB: the same operations give the same items, condition failures and errors as
moto's in-process mock (hypothesis draws the operations); and what moto does not model (capacity units, the
item size limit, throttling windows, stale reads, 1 MB scan pages) against DynamoDB's published rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from kinsumer.aws.error_codes import is_condition_failure
from tests.sim import SimDynamoDB

Item = dict[str, Any]


class Clock:
    """A fake clock: seconds, moved by hand."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def create(db: Any, name: str, **billing: Any) -> None:
    db.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "K", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "K", "AttributeType": "S"}],
        **(billing or {"BillingMode": "PAY_PER_REQUEST"}),
    )


def code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response["Error"]["Code"])


# -- differential: the sim against moto --------------------------------------------------------------------

KEYS = ["k0", "k1", "k2"]

# Each attribute keeps one type (a number, a string, a string set, a list of numbers, a map of a number and a
# string): moto fails with a TypeError on most comparisons and paths across types, so those are left out here.
numbers = st.builds(lambda n: {"N": str(n)}, st.integers(-3, 3))
strings = st.builds(lambda s: {"S": s}, st.text("xyz", max_size=3))
string_sets = st.builds(lambda v: {"SS": v}, st.lists(st.text("xyz", min_size=1, max_size=2), min_size=1, max_size=2,
                                                        unique=True))  # fmt: skip
number_lists = st.builds(lambda v: {"L": v}, st.lists(numbers, max_size=2))
maps = st.builds(
    lambda x, y: {"M": {**({"x": x} if x else {}), **({"y": y} if y else {})}}, st.none() | numbers, st.none() | strings
)
TYPED = {("a",): numbers, ("b",): strings, ("c",): string_sets, ("l",): number_lists, ("m",): maps,
         ("m", "x"): numbers, ("m", "y"): strings}  # fmt: skip
paths = st.sampled_from(list(TYPED))
SCALAR_PATHS = [("a",), ("b",), ("m", "x"), ("m", "y")]
TOP = ["a", "b", "c", "l", "m"]


class Expr:
    """Placeholders for one request's expressions."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def path(self, path: tuple[str, ...]) -> str:
        for part in path:
            self.names[f"#{part}"] = part
        return ".".join(f"#{part}" for part in path)

    def value(self, value: Any) -> str:
        label = f":v{len(self.values)}"
        self.values[label] = value
        return label

    def params(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.names:
            found["ExpressionAttributeNames"] = self.names
        if self.values:
            found["ExpressionAttributeValues"] = self.values
        return found


@st.composite
def conditions(draw: st.DrawFn, ex: Expr, depth: int = 0) -> str:
    kind = draw(st.sampled_from(["exists", "not_exists", "compare", "between", "in", "begins", "contains", "size"]
                                + (["and", "or", "not"] if depth < 2 else [])))  # fmt: skip
    if kind in ("and", "or"):
        left, right = draw(conditions(ex, depth + 1)), draw(conditions(ex, depth + 1))
        return f"({left}) {kind.upper()} ({right})"
    if kind == "not":
        return f"NOT ({draw(conditions(ex, depth + 1))})"
    if kind in ("exists", "not_exists"):
        return f"attribute_{kind}({ex.path(draw(paths))})"
    if kind in ("compare", "between", "in"):
        path = draw(st.sampled_from(SCALAR_PATHS))
        same = TYPED[path]
        if kind == "compare":
            return f"{ex.path(path)} {draw(st.sampled_from(['=', '<>', '<', '<=', '>', '>=']))} {ex.value(draw(same))}"
        if kind == "in":
            return f"{ex.path(path)} IN ({ex.value(draw(same))}, {ex.value(draw(same))})"
        low, high = sorted([draw(same), draw(same)], key=lambda v: int(v["N"]) if "N" in v else v["S"])
        return f"{ex.path(path)} BETWEEN {ex.value(low)} AND {ex.value(high)}"
    if kind == "begins":
        path = draw(st.sampled_from([("b",), ("m", "y")]))
        return f"begins_with({ex.path(path)}, {ex.value({'S': draw(st.text('xyz', min_size=1, max_size=2))})})"
    if kind == "contains":
        path, member = draw(st.sampled_from([(("b",), strings), (("c",), strings), (("l",), numbers)]))
        return f"contains({ex.path(path)}, {ex.value(draw(member))})"
    path = ex.path(draw(st.sampled_from([("b",), ("c",), ("l",), ("m",), ("m", "y")])))
    size = f"size({path}) {draw(st.sampled_from(['=', '<', '>']))} {ex.value({'N': str(draw(st.integers(0, 3)))})}"
    return f"(attribute_exists({path}) AND {size})"  # moto fails (a ValueError) on size() of a missing attribute


@st.composite
def updates(draw: st.DrawFn, ex: Expr) -> str:
    sets, removes, adds, deletes = [], [], [], []
    # no two paths overlap: DynamoDB refuses such an expression before reading the item (so does the sim, tested
    # below); moto misses m and m.x, and checks a path given twice only after the condition
    targets = draw(st.lists(paths, min_size=1, max_size=3, unique=True))
    if ("m",) in targets:
        targets = [p for p in targets if len(p) == 1]
    for path in targets:
        target = ex.path(path)
        action = draw(st.sampled_from(["set", "set", "if_not_exists", "remove", "remove", "arith", "append", "add",
                                       "delete"]))  # fmt: skip
        if action == "arith" and TYPED[path] is numbers:
            source = ex.path(draw(st.sampled_from([("a",), ("m", "x")])))
            sets.append(f"{target} = {source} {draw(st.sampled_from('+-'))} {ex.value(draw(numbers))}")
        elif action == "append" and path == ("l",):
            sets.append(f"{target} = list_append({target}, {ex.value({'L': [draw(numbers)]})})")
        elif action == "add" and path in (("a",), ("c",)):
            adds.append(f"{target} {ex.value(draw(TYPED[path]))}")
        elif action == "delete" and path == ("c",):
            deletes.append(f"{target} {ex.value(draw(string_sets))}")
        elif action == "remove":
            removes.append(target)
        elif action == "if_not_exists":
            sets.append(f"{target} = if_not_exists({target}, {ex.value(draw(TYPED[path]))})")
        else:
            sets.append(f"{target} = {ex.value(draw(TYPED[path]))}")
    clauses = [f"SET {', '.join(sets)}"] if sets else []
    clauses += [f"REMOVE {', '.join(removes)}"] if removes else []
    clauses += [f"ADD {', '.join(adds)}"] if adds else []
    clauses += [f"DELETE {', '.join(deletes)}"] if deletes else []
    return " ".join(draw(st.permutations(clauses)))


@st.composite
def operations(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    op = draw(st.sampled_from(["put", "put", "update", "update", "update", "delete", "get", "scan"]))
    key = {"K": {"S": draw(st.sampled_from(KEYS))}}
    ex = Expr()
    params: dict[str, Any] = {}
    if op == "put":
        attrs = {name: draw(TYPED[(name,)]) for name in draw(st.lists(st.sampled_from(TOP), max_size=4, unique=True))}
        params = {"Item": {**key, **attrs}, "ReturnValues": draw(st.sampled_from(["NONE", "ALL_OLD"]))}
    elif op == "update":
        params = {"Key": key, "UpdateExpression": draw(updates(ex)),
                  "ReturnValues": draw(st.sampled_from(["NONE", "ALL_OLD", "ALL_NEW"]))}  # fmt: skip
    elif op == "delete":
        params = {"Key": key, "ReturnValues": draw(st.sampled_from(["NONE", "ALL_OLD"]))}
    elif op == "get":
        params = {"Key": key, "ConsistentRead": True}
    else:
        params = {"ConsistentRead": True}
        if draw(st.booleans()):
            params["FilterExpression"] = draw(conditions(ex))
        if draw(st.booleans()):
            projected = draw(st.lists(st.sampled_from([("a",), ("b",), ("c",), ("m", "x"), ("m", "y")]), min_size=1,
                                      max_size=2, unique=True))  # fmt: skip
            params["ProjectionExpression"] = ", ".join(ex.path(p) for p in [*projected, ("K",)])
    if op in ("put", "update", "delete") and draw(st.booleans()):
        params["ConditionExpression"] = draw(conditions(ex))
        params["ReturnValuesOnConditionCheckFailure"] = draw(st.sampled_from(["NONE", "ALL_OLD"]))
    return op, {**params, **ex.params()}


def unordered(found: Any) -> Any:
    """``found`` with every set sorted (a set has no order; moto and the sim keep different ones)."""
    if isinstance(found, dict):
        return {k: sorted(v) if k in ("SS", "NS", "BS") else unordered(v) for k, v in found.items()}
    if isinstance(found, list):
        return [unordered(v) for v in found]
    return found


def outcome(db: Any, table: str, op: str, params: dict[str, Any]) -> Any:
    """What a call answered (without metadata), or its error: what both must agree on."""
    call = {"put": db.put_item, "update": db.update_item, "delete": db.delete_item, "get": db.get_item, "scan": db.scan}
    try:
        answer = dict(call[op](TableName=table, **params))
    except botocore.exceptions.ClientError as exc:
        found = {"code": code(exc), "item": exc.response.get("Item")}
        if is_condition_failure(exc):
            found["message"] = exc.response["Error"]["Message"]
        return unordered(found)
    answer.pop("ResponseMetadata")
    answer.pop("ConsumedCapacity", None)  # moto's figures are not DynamoDB's (tested below, on the sim)
    if op == "scan":  # the order of a scan is the table's (by hash in the sim, insertion order in moto)
        answer["Items"] = sorted(answer["Items"], key=lambda i: i["K"]["S"])
    return unordered(answer)


@pytest.fixture(scope="module")
def moto_db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


_tables = iter(range(1_000_000))


@settings(max_examples=50)
@given(st.lists(operations(), min_size=1, max_size=12))
def test_the_sim_agrees_with_moto_on_items_condition_failures_and_errors(moto_db: Any, ops: list[Any]) -> None:
    sim, table = SimDynamoDB(Clock()), f"t{next(_tables)}"
    create(sim, table)
    create(moto_db, table)
    for op, params in ops:
        assert outcome(sim, table, op, params) == outcome(moto_db, table, op, params), (op, params)
    assert outcome(sim, table, "scan", {}) == outcome(moto_db, table, "scan", {})
    moto_db.delete_table(TableName=table)


@settings(max_examples=10)
@given(st.integers(1, 15), st.integers(1, 6))
def test_scan_pages_with_a_limit_cover_the_table_once_as_on_moto(moto_db: Any, count: int, limit: int) -> None:
    sim, table = SimDynamoDB(Clock()), f"t{next(_tables)}"
    found = {}
    for db in (sim, moto_db):
        create(db, table)
        for i in range(count):
            db.put_item(TableName=table, Item={"K": {"S": f"k{i}"}, "n": {"N": str(i)}})
        pages = list(db.get_paginator("scan").paginate(TableName=table, PaginationConfig={"PageSize": limit}))
        keys = [item["K"]["S"] for page in pages for item in page["Items"]]
        assert len(keys) == len(set(keys)) == count
        assert all(len(page["Items"]) <= limit for page in pages)
        found[db is sim] = sorted(keys)
    assert found[True] == found[False]
    moto_db.delete_table(TableName=table)
