"""DynamoDB attribute values in botocore's low-level wire format: checked, normalised, sized, compared.

A value is a one-key dict: ``{"S": str}``, ``{"N": str}``, ``{"B": bytes}``, ``{"BOOL": bool}``,
``{"NULL": True}``, ``{"L": [value...]}``, ``{"M": {name: value}}``, ``{"SS"|"NS"|"BS": [...]}``.

Sizes follow DynamoDB's published rules (developer guide, "Item sizes and formats"), a close
approximation of what the service counts:

- an attribute name or map key: its UTF-8 bytes;
- S: UTF-8 bytes; B: raw bytes; BOOL, NULL: 1 byte;
- N: 1 byte per two significant digits (leading and trailing zeros trimmed), plus 1 byte;
- L, M: 3 bytes of overhead plus 1 byte per element, plus the elements (and the keys of a map);
- SS, NS, BS: the sum of the elements' sizes.
"""

from __future__ import annotations

import copy
import decimal
from collections.abc import Mapping
from typing import Any

from .._errors import SimError, validation

__all__ = ["Item", "check_item", "compare", "equal", "item_size", "normalise_number", "value_size"]

Item = dict[str, Any]
Value = dict[str, Any]

_TYPES = frozenset({"S", "N", "B", "BOOL", "NULL", "L", "M", "SS", "NS", "BS"})
_CONTEXT = decimal.Context(prec=38, Emin=-130, Emax=125, traps=[decimal.Inexact, decimal.Overflow, decimal.Underflow])


def normalise_number(text: str) -> str:
    """The canonical form DynamoDB stores and returns (``"1.50"`` -> ``"1.5"``, ``"1E+2"`` -> ``"100"``)."""
    try:
        number = decimal.Decimal(text.strip())
        if not number.is_finite():
            raise decimal.InvalidOperation
        number = _CONTEXT.plus(number)
    except (decimal.InvalidOperation, decimal.Inexact):
        raise validation(f"The parameter cannot be converted to a numeric value: {text}") from None
    except (decimal.Overflow, decimal.Underflow):
        raise validation(
            "Number overflow. Attempting to store a number with magnitude larger than supported range"
        ) from None
    if number.is_zero():
        return "0"
    return format(number.normalize(_CONTEXT), "f")


def check_value(value: Any, where: str) -> Value:
    """``value`` checked as DynamoDB checks it, numbers normalised, blobs as bytes; a new value."""
    if not isinstance(value, Mapping) or len(value) != 1 or next(iter(value)) not in _TYPES:
        raise validation(f"Supplied AttributeValue has more than one datatypes set, must contain exactly one of the "
                         f"supported datatypes ({where})")  # fmt: skip
    ((kind, content),) = value.items()
    if kind == "N":
        return {"N": normalise_number(content)}
    if kind == "B":
        return {"B": content.encode() if isinstance(content, str) else bytes(content)}
    if kind == "L":
        return {"L": [check_value(v, where) for v in content]}
    if kind == "M":
        return {"M": {k: check_value(v, where) for k, v in content.items()}}
    if kind in ("SS", "NS", "BS"):
        if not content:
            noun = {"SS": "string", "NS": "number", "BS": "binary"}[kind]
            raise validation(f"One or more parameter values were invalid: An {noun} set  may not be empty")
        items = [check_value({kind[0]: v}, where)[kind[0]] for v in content]
        if len(set(items)) != len(items):
            raise key_error(f"Input collection {content} contains duplicates.")
        return {kind: items}
    if kind == "NULL" and content is not True:
        raise key_error("Null attribute value types must have the value of true")
    return {kind: content}


def check_item(item: Mapping[str, Any], where: str) -> Item:
    return {name: check_value(value, where) for name, value in item.items()}


def value_size(value: Value) -> int:
    ((kind, content),) = value.items()
    if kind == "S":
        return len(content.encode())
    if kind == "B":
        return len(content)
    if kind == "N":
        return _number_size(content)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in content)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in content.items())
    if kind == "SS":
        return sum(len(s.encode()) for s in content)
    if kind == "NS":
        return sum(_number_size(n) for n in content)
    if kind == "BS":
        return sum(len(b) for b in content)
    return 1  # BOOL, NULL


def _number_size(text: str) -> int:
    digits = text.lstrip("-").replace(".", "").strip("0") or "0"
    return (len(digits) + 1) // 2 + 1


def item_size(item: Mapping[str, Value] | None) -> int:
    """The bytes DynamoDB counts for an item: names and values (0 for no item)."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def _sort_key(value: Value) -> tuple[str, Any]:
    ((kind, content),) = value.items()
    if kind == "N":
        return kind, decimal.Decimal(content)
    if kind == "S":
        return kind, content.encode()
    return kind, content


def equal(a: Value | None, b: Value | None) -> bool:
    """DynamoDB's ``=``: same type and value; sets compare unordered, numbers by value."""
    if a is None or b is None:
        return False
    ((ka, ca),), ((kb, cb),) = a.items(), b.items()
    if ka != kb:
        return False
    if ka == "N":
        return decimal.Decimal(ca) == decimal.Decimal(cb)
    if ka in ("SS", "BS"):
        return set(ca) == set(cb)
    if ka == "NS":
        return {decimal.Decimal(n) for n in ca} == {decimal.Decimal(n) for n in cb}
    if ka == "L":
        return len(ca) == len(cb) and all(equal(x, y) for x, y in zip(ca, cb, strict=True))
    if ka == "M":
        return ca.keys() == cb.keys() and all(equal(v, cb[k]) for k, v in ca.items())
    return bool(ca == cb)


def compare(a: Value | None, b: Value | None) -> int | None:
    """-1, 0 or 1 for two scalars of one ordered type (N, S by UTF-8 bytes, B by bytes); None otherwise."""
    if a is None or b is None:
        return None
    (kind_a,), (kind_b,) = a.keys(), b.keys()
    if kind_a != kind_b or kind_a not in ("N", "S", "B"):
        return None
    x, y = _sort_key(a)[1], _sort_key(b)[1]
    return int(x > y) - int(x < y)


def copied(item: Item) -> Item:
    """A deep copy (of checked values: a specialised copy, five times faster than ``copy.deepcopy``)."""
    return {name: _copied(value) for name, value in item.items()}


def _copied(value: Any) -> Any:
    if not isinstance(value, dict) or len(value) != 1:
        return copy.deepcopy(value)  # not a value as checked: no shortcut
    ((kind, content),) = value.items()
    if kind == "M" and isinstance(content, dict):
        return {"M": {k: _copied(v) for k, v in content.items()}}
    if kind == "L" and isinstance(content, list):
        return {"L": [_copied(v) for v in content]}
    if isinstance(content, (str, bytes, bool)):
        return {kind: content}
    return copy.deepcopy(value)


def key_error(message: str) -> SimError:
    return validation(f"One or more parameter values were invalid: {message}")
