"""Items as stored in the application's tables, read the same whichever library wrote them. Pure, no I/O.

The tables keep the names and most attributes of the Go library's (twitchscience/kinsumer), so an
application moves between the two in place. Two things of the Go library's rows differ from kinsumer's:

- **NULL attributes.** aws-sdk-go's ``dynamodbattribute`` writes every nil pointer as an attribute of
  type NULL (``{"NULL": true}``): each Go checkpoint row carries ``Finished`` and ``FinishedRFC`` so, and
  ``SequenceNumber`` too on a shard never read. A NULL attribute means "absent" wherever kinsumer reads an
  item (:func:`present`) or conditions a write on one (:func:`absent`).
- **Nanoseconds.** The Go library writes ``LastUpdate`` as ``time.Now().UnixNano()``. kinsumer reads any
  ``LastUpdate`` by its magnitude (:func:`epoch_ms`): from 10^15 on it is nanoseconds (10^15 ns is
  1970-01-12; 10^15 ms is the year 33658), below it milliseconds. That holds for every row either library
  writes. kinsumer writes nanoseconds in the checkpoints table, so that a Go client counts a shard kinsumer
  reads as owned (the Go library takes a row whose ``LastUpdate`` is older than its own cutoff, in
  nanoseconds), and milliseconds in its client rows and metadata items, which a Go client then finds stale:
  it counts no kinsumer client in its membership and takes the leader lease of an application it joins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NANOSECONDS_FROM", "NULL_TYPE", "absent", "epoch_ms", "is_nanoseconds", "present", "stored_cutoff"]

#: A LastUpdate from this value on is in epoch nanoseconds (the Go library's), below it in epoch milliseconds.
NANOSECONDS_FROM = 10**15
#: A condition's placeholder for the NULL type name, for :func:`absent` (``:null`` in ExpressionAttributeValues).
NULL_TYPE = {"S": "NULL"}


def present(item: Mapping[str, Any]) -> dict[str, Any]:
    """``item`` without its NULL-typed attributes (as the Go library writes nil pointers)."""
    return {name: value for name, value in item.items() if "NULL" not in value}


def absent(name: str) -> str:
    """A condition that attribute ``name`` (a placeholder, ``#fin``) is absent or NULL; needs ``:null``
    (:data:`NULL_TYPE`) among the values."""
    return f"(attribute_not_exists({name}) OR attribute_type({name}, :null))"


def is_nanoseconds(value: int) -> bool:
    """Whether a stored LastUpdate is in nanoseconds (the Go library's unit, and kinsumer's in checkpoint rows)."""
    return value >= NANOSECONDS_FROM


def epoch_ms(value: int) -> int:
    """A stored LastUpdate in epoch milliseconds, whichever unit it was stored in."""
    return value // 1_000_000 if is_nanoseconds(value) else value


def stored_cutoff(name: str, placeholder: str, cutoff_ms: int, values: dict[str, Any]) -> str:
    """A condition that the stored time ``name`` (a placeholder, ``#lu``) is at or before ``cutoff_ms``, in
    whichever unit it was stored; adds its values, named after ``placeholder`` (``:cutoff``), to ``values``."""
    values[placeholder] = {"N": str(cutoff_ms)}
    values[f"{placeholder}ns"] = {"N": str(cutoff_ms * 1_000_000)}
    values[f"{placeholder}from"] = {"N": str(NANOSECONDS_FROM)}
    return f"({name} <= {placeholder} OR ({name} >= {placeholder}from AND {name} <= {placeholder}ns))"
