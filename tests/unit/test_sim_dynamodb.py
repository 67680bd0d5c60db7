"""tests/sim's in-memory DynamoDB: the same operations give the same items, condition failures and errors as
moto's in-process mock (hypothesis draws the operations); and what moto does not model (capacity units, the
item size limit, throttling windows, stale reads, 1 MB scan pages) against DynamoDB's published rules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from kinsumer.aws.error_codes import is_condition_failure, is_in_use, is_not_found, is_transient
from kinsumer.testing._dynamodb.values import item_size
from tests.sim import Limits, SimDynamoDB

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


def response(exc: botocore.exceptions.ClientError) -> dict[str, Any]:
    """The parsed error response, with the modeled fields botocore's typing does not list."""
    return dict(exc.response)


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
    sized_path = ex.path(draw(st.sampled_from([("b",), ("c",), ("l",), ("m",), ("m", "y")])))
    bound = ex.value({"N": str(draw(st.integers(0, 3)))})
    size = f"size({sized_path}) {draw(st.sampled_from(['=', '<', '>']))} {bound}"
    return f"(attribute_exists({sized_path}) AND {size})"  # moto fails (a ValueError) on size() of a missing attribute


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
    """moto's DynamoDB with one table, ``t``, emptied by each example (creating a table there takes long)."""
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        create(db, "t")
        yield db


def fresh(moto_db: Any) -> SimDynamoDB:
    """An empty sim table ``t``, and moto's emptied."""
    for page in moto_db.get_paginator("scan").paginate(TableName="t", ConsistentRead=True):
        for item in page["Items"]:
            moto_db.delete_item(TableName="t", Key={"K": item["K"]})
    sim = SimDynamoDB(Clock())
    create(sim, "t")
    return sim


@settings(max_examples=50)
@given(st.lists(operations(), min_size=1, max_size=12))
def test_the_sim_agrees_with_moto_on_items_condition_failures_and_errors(moto_db: Any, ops: list[Any]) -> None:
    sim = fresh(moto_db)
    for op, params in ops:
        assert outcome(sim, "t", op, params) == outcome(moto_db, "t", op, params), (op, params)
    assert outcome(sim, "t", "scan", {}) == outcome(moto_db, "t", "scan", {})


@settings(max_examples=10)
@given(st.integers(1, 15), st.integers(1, 6))
def test_scan_pages_with_a_limit_cover_the_table_once_as_on_moto(moto_db: Any, count: int, limit: int) -> None:
    sim = fresh(moto_db)
    found = {}
    for db in (sim, moto_db):
        for i in range(count):
            db.put_item(TableName="t", Item={"K": {"S": f"k{i}"}, "n": {"N": str(i)}})
        pages = list(db.get_paginator("scan").paginate(TableName="t", PaginationConfig={"PageSize": limit}))
        keys = [item["K"]["S"] for page in pages for item in page["Items"]]
        assert len(keys) == len(set(keys)) == count
        assert all(len(page["Items"]) <= limit for page in pages)
        found[db is sim] = sorted(keys)
    assert found[True] == found[False]


# -- what moto does not model: sizes, units, throttling, stale reads, pages --------------------------------


def sim_table(clock: Clock | None = None, **options: Any) -> tuple[SimDynamoDB, Clock]:
    clock = clock or Clock()
    db = SimDynamoDB(clock, **options)
    create(db, "t")
    return db, clock


def sized(size: int, key: str = "k0") -> Item:
    """An item of exactly ``size`` bytes as DynamoDB counts them (``K`` and ``p`` names, string values)."""
    item = {"K": {"S": key}, "p": {"S": ""}}
    item["p"]["S"] = "x" * (size - item_size(item))
    assert item_size(item) == size
    return item


def units(answer: dict[str, Any]) -> float:
    return float(answer["ConsumedCapacity"]["CapacityUnits"])


def test_item_sizes_follow_dynamodb_published_rules() -> None:
    assert item_size({"K": {"S": "ab"}}) == 3  # name + UTF-8 bytes
    assert item_size({"n": {"N": "12345"}}) == 1 + 3 + 1  # 1 byte per two significant digits, + 1
    assert item_size({"n": {"N": "-0.00123000"}}) == 1 + 2 + 1  # leading and trailing zeros trimmed
    assert item_size({"a": {"L": [{"S": "xy"}, {"BOOL": True}]}}) == 1 + 3 + (1 + 2) + (1 + 1)
    assert item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + (1 + 1 + 1)
    assert item_size({"s": {"SS": ["ab", "c"]}, "b": {"B": b"\x00\x01"}, "z": {"NULL": True}}) == 4 + 3 + 2


def test_the_400_kb_item_limit_refuses_a_put_or_an_update_past_it_and_changes_nothing() -> None:
    db, _ = sim_table()
    db.put_item(TableName="t", Item=sized(400 * 1024))
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        db.put_item(TableName="t", Item=sized(400 * 1024 + 1, "k1"))
    assert code(caught.value) == "ValidationException"
    assert caught.value.response["Error"]["Message"] == "Item size has exceeded the maximum allowed size"
    db.put_item(TableName="t", Item=sized(400 * 1024 - 10, "k2"))
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        db.update_item(TableName="t", Key={"K": {"S": "k2"}}, UpdateExpression="SET q = :v",
                       ExpressionAttributeValues={":v": {"S": "x" * 20}})  # fmt: skip
    assert caught.value.response["Error"]["Message"] == "Item size to update has exceeded the maximum allowed size"
    assert {i["K"]["S"]: item_size(i) for i in db.items("t")} == {"k0": 400 * 1024, "k2": 400 * 1024 - 10}


def test_write_units_are_per_kb_of_the_larger_version_and_a_failed_condition_still_consumes() -> None:
    db, _ = sim_table()
    total = "TOTAL"
    assert units(db.put_item(TableName="t", Item=sized(1024), ReturnConsumedCapacity=total)) == 1
    assert units(db.put_item(TableName="t", Item=sized(1025), ReturnConsumedCapacity=total)) == 2
    grow = db.update_item(TableName="t", Key={"K": {"S": "k0"}}, UpdateExpression="SET q = :v",
                          ExpressionAttributeValues={":v": {"S": "x" * 2000}},
                          ReturnConsumedCapacity=total)  # fmt: skip
    assert units(grow) == 3  # 1025 + 1 + 2000 bytes after
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        db.put_item(TableName="t", Item=sized(10), ConditionExpression="attribute_not_exists(K)")
    assert is_condition_failure(caught.value)
    assert units(db.delete_item(TableName="t", Key={"K": {"S": "k0"}}, ReturnConsumedCapacity=total)) == 3
    assert units(db.delete_item(TableName="t", Key={"K": {"S": "k0"}}, ReturnConsumedCapacity=total)) == 1
    meter = db.meter.table("t")
    assert meter.total.write_units == 1 + 2 + 3 + 3 + 3 + 1  # the failed put consumed the item's 3 KB
    assert meter.total.condition_failures == 1 and meter.operations["PutItem"].calls == 3
    assert meter.hottest("write_units")[0][0] == "k0" and meter.peak("k0") == (0.0, 13.0)


def test_read_units_are_per_4_kb_halved_when_eventually_consistent_and_a_scan_rounds_its_sum() -> None:
    db, clock = sim_table()
    db.put_item(TableName="t", Item=sized(4096))
    db.put_item(TableName="t", Item=sized(4097, "k1"))

    def get(key: str, consistent: bool) -> float:
        return units(db.get_item(TableName="t", Key={"K": {"S": key}}, ConsistentRead=consistent,
                                 ReturnConsumedCapacity="TOTAL"))  # fmt: skip

    assert (get("k0", True), get("k1", True), get("k1", False), get("none", True), get("none", False)) == (
        1, 2, 1, 1, 0.5,
    )  # fmt: skip
    small, _ = sim_table()
    for i in range(10):
        small.put_item(TableName="t", Item=sized(100, f"k{i}"))
    scan = small.scan(TableName="t", ConsistentRead=True, ReturnConsumedCapacity="INDEXES")
    assert scan["ConsumedCapacity"] == {"TableName": "t", "CapacityUnits": 1.0, "Table": {"CapacityUnits": 1.0}}
    assert units(small.scan(TableName="t", ReturnConsumedCapacity="TOTAL")) == 0.5  # 1,000 bytes: one 4 KB block
    meter = small.meter.table("t")
    assert sum(u.read_units for u in meter.items.values()) == pytest.approx(1.5)
    assert meter.seconds[int(clock.now)].calls == 12 and meter.operations["Scan"].read_units == 1.5


def test_a_scan_page_stops_at_1_mb_and_the_next_starts_after_its_last_key() -> None:
    db, _ = sim_table(validate=False)
    for i in range(25):
        db.put_item(TableName="t", Item=sized(100_005, f"k{i:02d}"))
    pages = list(db.get_paginator("scan").paginate(TableName="t", ConsistentRead=True, ReturnConsumedCapacity="TOTAL"))
    assert [len(p["Items"]) for p in pages] == [10, 10, 5]
    assert ["LastEvaluatedKey" in p for p in pages] == [True, True, False]
    assert [p["ConsumedCapacity"]["CapacityUnits"] for p in pages] == [245, 245, 123]  # ceil(bytes / 4096)
    assert len({i["K"]["S"] for p in pages for i in p["Items"]}) == 25


def test_a_hot_item_is_throttled_past_1000_write_units_a_second_and_the_next_second_serves_it() -> None:
    db, clock = sim_table(validate=False)
    for _ in range(1000):
        db.put_item(TableName="t", Item=sized(1000))
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        db.put_item(TableName="t", Item={"K": {"S": "k0"}, "changed": {"BOOL": True}})
    assert code(caught.value) == "ProvisionedThroughputExceededException" and is_transient(caught.value)
    arn = "arn:aws:dynamodb:us-east-1:123456789012:table/t"
    assert response(caught.value)["ThrottlingReasons"] == [{"reason": "TableWriteKeyRangeThroughputExceeded",
                                                            "resource": arn}]  # fmt: skip
    assert isinstance(caught.value, db.exceptions.ProvisionedThroughputExceededException)
    assert "changed" not in db.items("t")[0]  # a throttled request changes nothing
    db.put_item(TableName="t", Item=sized(1000, "k1"))  # another item: another partition
    clock.now += 1
    db.put_item(TableName="t", Item=sized(1000))
    meter = db.meter.table("t")
    assert meter.total.throttled == 1 and meter.peak("k0") == (0.0, 1000.0)


def test_a_hot_item_is_throttled_past_3000_read_units_a_second() -> None:
    db, _ = sim_table(validate=False)
    db.put_item(TableName="t", Item=sized(40 * 1024))  # 10 units a strongly consistent read
    for _ in range(300):
        db.get_item(TableName="t", Key={"K": {"S": "k0"}}, ConsistentRead=True)
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        db.get_item(TableName="t", Key={"K": {"S": "k0"}})
    assert response(caught.value)["ThrottlingReasons"][0]["reason"] == "TableReadKeyRangeThroughputExceeded"


def test_a_provisioned_table_throttles_past_its_units_and_an_overdraft_is_repaid_from_the_next_second() -> None:
    clock = Clock(100.0)
    db = SimDynamoDB(clock)
    create(db, "t", BillingMode="PROVISIONED", ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5})
    for i in range(5):
        db.put_item(TableName="t", Item={"K": {"S": f"k{i}"}})
    with pytest.raises(db.exceptions.ProvisionedThroughputExceededException) as caught:
        db.put_item(TableName="t", Item={"K": {"S": "k9"}})
    assert response(caught.value)["ThrottlingReasons"][0]["reason"] == "TableWriteProvisionedThroughputExceeded"
    clock.now = 101.0
    db.put_item(TableName="t", Item=sized(10 * 1024, "big"))  # 10 units: admitted on a positive balance
    clock.now = 102.0
    with pytest.raises(db.exceptions.ProvisionedThroughputExceededException):
        db.put_item(TableName="t", Item={"K": {"S": "k9"}})  # the overdraft of 5 is repaid by this second's 5
    clock.now = 103.0
    db.put_item(TableName="t", Item={"K": {"S": "k9"}})


def test_burst_capacity_banks_unused_provisioned_units_and_an_on_demand_maximum_throttles() -> None:
    db, clock = sim_table(validate=False)
    db.set_limits("t", Limits(provisioned_write=5, burst_seconds=300))
    db.put_item(TableName="t", Item={"K": {"S": "k0"}})
    clock.now += 10  # 4 units left in the first second, 9 idle seconds of 5: 49 banked, plus this second's 5
    for i in range(54):
        db.put_item(TableName="t", Item={"K": {"S": f"k{i}"}})
    with pytest.raises(botocore.exceptions.ClientError):
        db.put_item(TableName="t", Item={"K": {"S": "k0"}})
    capped, _ = sim_table(limits={"t": Limits(on_demand_write=3)})
    for i in range(3):
        capped.put_item(TableName="t", Item={"K": {"S": f"k{i}"}})
    with pytest.raises(capped.exceptions.ThrottlingException) as caught:
        capped.put_item(TableName="t", Item={"K": {"S": "k0"}})
    assert response(caught.value)["throttlingReasons"][0]["reason"] == "TableWriteMaxOnDemandThroughputExceeded"
    assert is_transient(caught.value)


def test_an_eventually_consistent_read_may_return_the_version_settled_staleness_ago() -> None:
    db, clock = sim_table(Clock(0.0), staleness=1.0, stale_probability=1.0)
    db.put_item(TableName="t", Item={"K": {"S": "k0"}, "v": {"N": "1"}})
    clock.now = 5.0
    db.put_item(TableName="t", Item={"K": {"S": "k0"}, "v": {"N": "2"}})
    db.put_item(TableName="t", Item={"K": {"S": "new"}})

    def version(consistent: bool, key: str = "k0") -> str | None:
        item = db.get_item(TableName="t", Key={"K": {"S": key}}, ConsistentRead=consistent).get("Item")
        return None if item is None else str(item.get("v", {}).get("N"))

    clock.now = 5.5
    assert (version(False), version(True), version(False, "new")) == ("1", "2", None)
    clock.now = 6.0
    assert version(False) == "2" and version(False, "new") == "None"
    db.delete_item(TableName="t", Key={"K": {"S": "k0"}})
    clock.now = 6.5
    assert {i["K"]["S"] for i in db.scan(TableName="t")["Items"]} == {"k0", "new"}  # the deleted one, stale
    assert {i["K"]["S"] for i in db.scan(TableName="t", ConsistentRead=True)["Items"]} == {"new"}


def test_stale_reads_are_a_seeded_choice_and_staleness_0_is_always_fresh() -> None:
    def reads(seed: int, staleness: float) -> list[str]:
        db, clock = sim_table(Clock(0.0), staleness=staleness, seed=seed)
        db.put_item(TableName="t", Item={"K": {"S": "k0"}, "v": {"N": "-1"}})
        for v in range(3):
            clock.now = 10.0 + v / 10
            db.put_item(TableName="t", Item={"K": {"S": "k0"}, "v": {"N": str(v)}})
        clock.now = 10.25
        return [db.get_item(TableName="t", Key={"K": {"S": "k0"}})["Item"]["v"]["N"] for _ in range(40)]

    assert reads(7, 1.0) == reads(7, 1.0)
    assert set(reads(7, 1.0)) == {"-1", "0", "1", "2"}  # the settled version (of t=0) or a newer one
    assert set(reads(7, 0.0)) == {"2"}


def test_tables_answer_with_the_error_codes_kinsumer_recognises() -> None:
    db, _ = sim_table()
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        create(db, "t")
    assert is_in_use(caught.value) and caught.value.response["Error"]["Message"] == "Table already exists: t"
    db.delete_table(TableName="t")
    calls: list[Callable[[], Any]] = [lambda: db.describe_table(TableName="t"),
                                      lambda: db.put_item(TableName="t", Item={"K": {"S": "a"}})]  # fmt: skip
    for call in calls:
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            call()
        assert is_not_found(caught.value) and caught.value.operation_name in ("DescribeTable", "PutItem")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"ConditionExpression": "attribute_exists(K)", "ExpressionAttributeNames": {"#x": "x"}},
         "Value provided in ExpressionAttributeNames unused in expressions: keys: {#x}"),
        ({"ConditionExpression": "attribute_exists(Name)"},
         "Invalid ConditionExpression: Attribute name is a reserved keyword; reserved keyword: Name"),
        ({"ConditionExpression": "attribute_exists(#n)"},
         "Invalid ConditionExpression: An expression attribute name used in the document path is not defined; "
         "attribute name: #n"),
        ({"ConditionExpression": "((attribute_exists(K)))"},
         "Invalid ConditionExpression: The expression has redundant parentheses;"),
        ({"ConditionExpression": "attribute_exists(K) AND"},
         'Invalid ConditionExpression: Syntax error; token: "<EOF>", near: "AND"'),
    ],
)  # fmt: skip
def test_malformed_expressions_are_refused_as_dynamodb_refuses_them(params: dict[str, Any], message: str) -> None:
    db, _ = sim_table()
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        db.put_item(TableName="t", Item={"K": {"S": "a"}}, **params)
    assert code(caught.value) == "ValidationException" and caught.value.response["Error"]["Message"] == message


def test_updates_of_a_key_or_of_overlapping_paths_are_refused_before_the_condition() -> None:
    db, _ = sim_table()
    for update in ("SET K = :v", "SET a = :v, a.b = :v"):
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            db.update_item(TableName="t", Key={"K": {"S": "a"}}, UpdateExpression=update,
                           ConditionExpression="attribute_exists(K)",
                           ExpressionAttributeValues={":v": {"S": "x"}})  # fmt: skip
        assert code(caught.value) == "ValidationException"
    assert db.items("t") == []


def test_numbers_come_back_normalised_and_unmodeled_or_malformed_parameters_fail_loudly() -> None:
    db, _ = sim_table()
    db.put_item(TableName="t", Item={"K": {"S": "a"}, "n": {"N": "01.50"}, "e": {"N": "1E+2"}})
    assert db.get_item(TableName="t", Key={"K": {"S": "a"}})["Item"] == {"K": {"S": "a"}, "n": {"N": "1.5"},
                                                                          "e": {"N": "100"}}  # fmt: skip
    with pytest.raises(NotImplementedError, match="Select"):
        db.scan(TableName="t", Select="COUNT")
    with pytest.raises(botocore.exceptions.ParamValidationError):
        db.put_item(TableName="t", Item={"K": {"S": "a"}, "n": {"N": 5}})


def test_calls_are_seen_by_kinsumers_call_watch_through_botocores_events() -> None:
    from kinsumer.aws.call_watch import CallWatch
    from kinsumer.aws.tables import Tables
    from kinsumer.stats import StatReceiver

    calls: list[tuple[str, str, str | None]] = []

    class Recorder(StatReceiver):
        def dynamodb_call(self, operation: str, table: str, seconds: float, error: str | None) -> None:
            calls.append((operation, table, error))

    db = SimDynamoDB(Clock())
    create(db, "app_clients")
    watch = CallWatch(Tables.for_application("app"), Recorder())
    watch.attach(db)
    db.put_item(TableName="app_clients", Item={"K": {"S": "a"}})
    with pytest.raises(botocore.exceptions.ClientError):
        db.put_item(TableName="app_clients", Item={"K": {"S": "a"}}, ConditionExpression="attribute_not_exists(K)")
    watch.detach()
    db.get_item(TableName="app_clients", Key={"K": {"S": "a"}})
    assert calls == [("PutItem", "clients", None), ("PutItem", "clients", "ConditionalCheckFailedException")]
