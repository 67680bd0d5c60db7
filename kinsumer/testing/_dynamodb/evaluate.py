"""Evaluating parsed expressions on items: conditions, updates (on a copy), projections."""

from __future__ import annotations

import decimal
import itertools
from typing import Any

from .._errors import SimError, validation
from .expressions import Condition, Operand, Path, Update, overlap
from .values import Item, Value, compare, copied, equal, key_error, normalise_number

__all__ = ["apply_update", "check_update", "condition_failed", "holds", "project", "resolve"]

_INVALID_PATH = "The document path provided in the update expression is invalid for update"
_BAD_TYPE = "An operand in the update expression has an incorrect data type"


def resolve(item: Item | None, path: Path) -> Value | None:
    """The value at ``path`` in ``item``, or None."""
    if item is None:
        return None
    first, *rest = path
    value: Value | None = item.get(str(first))
    for element in rest:
        if value is None:
            return None
        if isinstance(element, int):
            items = value.get("L")
            value = items[element] if items is not None and element < len(items) else None
        else:
            members = value.get("M")
            value = members.get(element) if members is not None else None
    return value


def _operand(item: Item | None, operand: Operand) -> Value | None:
    if operand.kind == "value":
        return operand.value
    found = resolve(item, operand.path)
    if operand.kind == "path" or found is None:
        return found
    ((kind, content),) = found.items()  # size()
    if kind in ("S", "B", "L", "M", "SS", "NS", "BS"):
        return {"N": str(len(content))}
    return None


def holds(condition: Condition, item: Item | None) -> bool:
    """Whether ``condition`` holds for ``item`` (None: no item; every attribute is then absent)."""
    kind, args = condition.kind, condition.args
    if kind == "AND":
        return all(holds(c, item) for c in args)
    if kind == "OR":
        return any(holds(c, item) for c in args)
    if kind == "NOT":
        return not holds(args[0], item)
    values = [_operand(item, a) for a in args]
    if kind == "attribute_exists":
        return values[0] is not None
    if kind == "attribute_not_exists":
        return values[0] is None
    if kind == "attribute_type":
        return values[0] is not None and values[1] is not None and next(iter(values[0])) == values[1].get("S")
    if kind == "begins_with":
        return _begins_with(values[0], values[1])
    if kind == "contains":
        return _contains(values[0], values[1])
    if kind == "=":
        return equal(values[0], values[1])
    if kind == "<>":
        return not equal(values[0], values[1])
    if kind == "IN":
        return any(equal(values[0], option) for option in values[1:])
    if kind == "BETWEEN":
        low, high = compare(values[0], values[1]), compare(values[0], values[2])
        return low is not None and high is not None and low >= 0 and high <= 0
    order = compare(values[0], values[1])
    if order is None:
        return False
    return {"<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0}[kind]


def _begins_with(value: Value | None, prefix: Value | None) -> bool:
    if value is None or prefix is None or value.keys() != prefix.keys() or next(iter(value)) not in ("S", "B"):
        return False
    ((kind, content),) = value.items()
    return bool(content.startswith(prefix[kind]))


def _contains(value: Value | None, member: Value | None) -> bool:
    if value is None or member is None:
        return False
    ((kind, content),) = value.items()
    ((member_kind, member_content),) = member.items()
    if kind in ("S", "B"):
        return member_kind == kind and member_content in content
    if kind in ("SS", "NS", "BS"):
        return member_kind == kind[0] and any(equal({member_kind: x}, member) for x in content)
    if kind == "L":
        return any(equal(x, member) for x in content)
    return False


def _term(item: Item | None, term: Operand) -> Value:
    if term.kind == "value":
        assert term.value is not None
        return term.value
    if term.kind == "path":
        found = resolve(item, term.path)
        if found is None:
            raise validation("The provided expression refers to an attribute that does not exist in the item")
        return found
    if term.kind == "if_not_exists":
        found = resolve(item, term.args[0].path)
        return found if found is not None else _term(item, term.args[1])
    first, second = _term(item, term.args[0]), _term(item, term.args[1])
    if term.kind == "list_append":
        if "L" not in first or "L" not in second:
            wrong = next(iter(first if "L" not in first else second))
            raise validation("Invalid UpdateExpression: Incorrect operand type for operator or function; "
                             f"operator or function: list_append, operand type: {wrong}")  # fmt: skip
        return {"L": [*first["L"], *second["L"]]}
    if "N" not in first or "N" not in second:
        raise validation(_BAD_TYPE)
    a, b = decimal.Decimal(first["N"]), decimal.Decimal(second["N"])
    return {"N": normalise_number(str(a + b if term.kind == "+" else a - b))}


def check_update(update: Update, keys: tuple[str, ...]) -> None:
    """Refuse what DynamoDB refuses before reading the item: a key attribute updated, overlapping paths."""
    paths = update.paths()
    for path in paths:
        if path[0] in keys:
            raise key_error(f"Cannot update attribute {path[0]}. This attribute is part of the key")
    for i, one in enumerate(paths):
        for two in paths[i + 1 :]:
            if one[: len(two)] == two or two[: len(one)] == one:
                raise validation(f"Invalid UpdateExpression: {overlap(one, two)}")
    for path, _ in (*update.adds, *update.deletes):
        if len(path) > 1:
            raise validation("Invalid UpdateExpression: ADD and DELETE support only top-level attributes")


def apply_update(update: Update, old: Item | None, key: Item) -> Item:
    """The item after ``update`` (every operand read from ``old``, as DynamoDB does); ``old`` is not changed."""
    new = copied(old) if old is not None else copied(key)
    values = [(path, _term(old, term)) for path, term in update.sets]
    for path, value in values:
        _assign(new, path, copied(value))
    for path in sorted(update.removes, key=_removal_order, reverse=True):
        _remove(new, path)
    for path, value in update.adds:
        _add(new, str(path[0]), value)
    for path, value in update.deletes:
        _delete(new, str(path[0]), value)
    return new


def _removal_order(path: Path) -> list[tuple[int, Any]]:
    """Removals of list elements go from the highest index down, so each index means what it did in the item."""
    return [(0, e) if isinstance(e, int) else (1, e) for e in path]


def _container(item: Item, path: Path) -> Any:
    """The dict (map) or list holding ``path``'s last element; None if a parent is missing or not a container."""
    holder: Any = item
    for element in path[:-1]:
        if isinstance(holder, dict) and isinstance(element, str):
            value = holder.get(element)
        elif isinstance(holder, list) and isinstance(element, int) and element < len(holder):
            value = holder[element]
        else:
            return None
        if value is None:
            return None
        holder = value.get("M", value.get("L"))
    return holder


def _assign(item: Item, path: Path, value: Value) -> None:
    holder, last = _container(item, path), path[-1]
    if isinstance(last, int) and isinstance(holder, list):
        if last < len(holder):
            holder[last] = value
        else:
            holder.append(value)
    elif isinstance(last, str) and isinstance(holder, dict):
        holder[last] = value
    else:
        raise validation(_INVALID_PATH)


def _remove(item: Item, path: Path) -> None:
    """Remove ``path`` if present; its parents must be there (a missing attribute at the end is no error)."""
    holder, last = _container(item, path), path[-1]
    if isinstance(last, int) and isinstance(holder, list):
        if last < len(holder):
            del holder[last]
    elif isinstance(last, str) and isinstance(holder, dict):
        holder.pop(last, None)
    else:
        raise validation(_INVALID_PATH)


def _add(item: Item, name: str, value: Value) -> None:
    current = item.get(name)
    ((kind, content),) = value.items()
    if kind not in ("N", "SS", "NS", "BS"):
        raise validation("Invalid UpdateExpression: Incorrect operand type for operator or function; operator: ADD, "
                         f"operand type: {kind}")  # fmt: skip
    if current is None:
        item[name] = copied(value)
    elif kind not in current:
        raise validation(_BAD_TYPE)
    elif kind == "N":
        item[name] = {"N": normalise_number(str(decimal.Decimal(current["N"]) + decimal.Decimal(content)))}
    else:
        item[name] = {kind: current[kind] + [x for x in content if not _in_set(kind, x, current[kind])]}


def _in_set(kind: str, x: Any, members: list[Any]) -> bool:
    return any(equal({kind[0]: x}, {kind[0]: m}) for m in members)


def _delete(item: Item, name: str, value: Value) -> None:
    current = item.get(name)
    ((kind, content),) = value.items()
    if kind not in ("SS", "NS", "BS"):
        raise validation("Invalid UpdateExpression: Incorrect operand type for operator or function; operator: DELETE, "
                         f"operand type: {kind}")  # fmt: skip
    if current is None:
        return
    if kind not in current:
        raise validation(_BAD_TYPE)
    left = [m for m in current[kind] if not _in_set(kind, m, content)]
    if left:
        item[name] = {kind: left}
    else:
        del item[name]


def project(item: Item, paths: list[Path]) -> Item:
    """The parts of ``item`` the paths name, nested as in the item (lists keep their order, compacted)."""
    tree: dict[str | int, Any] = {}
    for path in paths:
        value = resolve(item, path)
        if value is None:
            continue
        node = tree
        for element, following in itertools.pairwise(path):
            node = node.setdefault(element, {"__kind": "L" if isinstance(following, int) else "M"})
        node[path[-1]] = ("leaf", copied(value))
    return {str(k): _built(v) for k, v in tree.items()}


def _built(node: Any) -> Value:
    if isinstance(node, tuple):
        return node[1]  # type: ignore[no-any-return]
    kind = node.pop("__kind")
    if kind == "L":
        return {"L": [_built(node[i]) for i in sorted(node)]}
    return {"M": {str(k): _built(v) for k, v in node.items()}}


def condition_failed(item: Item | None, return_old: bool) -> SimError:
    extra = {"Item": copied(item)} if return_old and item is not None else {}
    return SimError("ConditionalCheckFailedException", "The conditional request failed", **extra)
