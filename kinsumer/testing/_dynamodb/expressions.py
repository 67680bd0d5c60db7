"""A small recursive-descent parser for DynamoDB's expressions: condition (and filter), update, projection.

Placeholders are resolved while parsing (``#n`` through ExpressionAttributeNames, ``:v`` through
ExpressionAttributeValues) and recorded, so a request can be refused as DynamoDB refuses it: an
undefined placeholder, an unused one, a reserved word used as a bare attribute name, a syntax error.

Grammar (DynamoDB's, developer guide "Condition and filter expressions" and "Update expressions"):

    condition := disjunct ("OR" disjunct)*          disjunct := conjunct ("AND" conjunct)*
    conjunct  := "NOT" conjunct | "(" condition ")" | function "(" args ")"    (never "((" condition "))")
               | operand comparator operand | operand "BETWEEN" operand "AND" operand
               | operand "IN" "(" operand ("," operand)* ")"
    operand   := path | :value | "size" "(" path ")"
    path      := (name | #name) ("." (name | #name) | "[" digits "]")*
    update    := ("SET" set ("," set)* | "REMOVE" path ("," path)* | "ADD" path :value (...)*
                 | "DELETE" path :value (...)*)+
    set       := path "=" term (("+" | "-") term)?
    term      := path | :value | "if_not_exists" "(" path "," term ")" | "list_append" "(" term "," term ")"
    projection:= path ("," path)*
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import SimError, validation
from .reserved import RESERVED
from .values import Value, check_value

__all__ = ["Placeholders", "parse_condition", "parse_projection", "parse_update"]

Path = tuple[str | int, ...]

_TOKEN = re.compile(
    r"\s*(?:(<>|<=|>=|[=<>(),.\[\]+-])|(#[A-Za-z0-9_]+)|(:[A-Za-z0-9_]+)|([A-Za-z_][A-Za-z0-9_]*)|(\d+))"
)
_COMPARATORS = frozenset({"=", "<>", "<", "<=", ">", ">="})
_CONDITION_FUNCTIONS = frozenset(
    {"attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains"}
)
_CLAUSES = ("SET", "REMOVE", "ADD", "DELETE")


@dataclass(frozen=True)
class Operand:
    kind: str  # "path", "value", "size", "if_not_exists", "list_append", "+", "-"
    path: Path = ()
    value: Value | None = None
    args: tuple[Operand, ...] = ()


@dataclass(frozen=True)
class Condition:
    kind: str  # "AND", "OR", "NOT", a comparator, "BETWEEN", "IN", or a function name
    args: tuple[Any, ...]  # Conditions for AND/OR/NOT, Operands otherwise


@dataclass(frozen=True)
class Update:
    sets: tuple[tuple[Path, Operand], ...] = ()
    removes: tuple[Path, ...] = ()
    adds: tuple[tuple[Path, Value], ...] = ()
    deletes: tuple[tuple[Path, Value], ...] = ()

    def paths(self) -> list[Path]:
        return [p for p, _ in self.sets] + list(self.removes) + [p for p, _ in self.adds] + [p for p, _ in self.deletes]


@dataclass
class Placeholders:
    """A request's ExpressionAttributeNames / Values, and which of them its expressions used."""

    names: Mapping[str, str] | None
    values: Mapping[str, Any] | None
    used_names: set[str] = field(default_factory=set)
    used_values: set[str] = field(default_factory=set)

    def check_all_used(self) -> None:
        if self.names is not None and not self.names:
            raise validation("ExpressionAttributeNames must not be empty")
        if self.values is not None and not self.values:
            raise validation("ExpressionAttributeValues must not be empty")
        for label, given, used in (("Names", self.names, self.used_names), ("Values", self.values, self.used_values)):
            unused = sorted(set(given or ()) - used)
            if unused:
                raise validation(f"Value provided in ExpressionAttribute{label} unused in expressions: "
                                 f"keys: {{{', '.join(unused)}}}")  # fmt: skip


class _Parser:
    def __init__(self, text: str, kind: str, placeholders: Placeholders) -> None:
        self.kind = kind
        self.text = text
        self.ph = placeholders
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise self.error(f'Invalid character; token: "{text[pos:].strip()[:1]}"')
            self.tokens.append(match.group(match.lastindex or 0))
            pos = match.end()
        if not self.tokens:
            raise self.error("The expression can not be empty;")
        self.at = 0

    def error(self, message: str) -> SimError:
        return validation(f"Invalid {self.kind}: {message}")

    def peek(self, offset: int = 0) -> str | None:
        index = self.at + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def keyword(self, *words: str) -> str | None:
        token = self.peek()
        if token is not None and token.upper() in words:
            self.at += 1
            return token.upper()
        return None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            near = token if token is not None else "<EOF>"
            context = " ".join(self.tokens[max(0, self.at - 1) : self.at + 2])
            raise self.error(f'Syntax error; token: "{near}", near: "{context}"')
        self.at += 1
        return token

    def end(self) -> None:
        if self.peek() is not None:
            self.take("<end>")

    # -- paths and operands
    def name(self) -> str:
        token = self.take()
        if token.startswith("#"):
            if self.ph.names is None or token not in self.ph.names:
                raise self.error(f"An expression attribute name used in the document path is not defined; "
                                 f"attribute name: {token}")  # fmt: skip
            self.ph.used_names.add(token)
            return self.ph.names[token]
        if not (token[0].isalpha() or token[0] == "_"):
            self.at -= 1
            self.take("<name>")
        if token.upper() in RESERVED:
            raise self.error(f"Attribute name is a reserved keyword; reserved keyword: {token}")
        return token

    def path(self) -> Path:
        elements: list[str | int] = [self.name()]
        while self.peek() in (".", "["):
            if self.take() == ".":
                elements.append(self.name())
            else:
                digits = self.take()
                if not digits.isdigit():
                    raise self.error(f'Syntax error; token: "{digits}"')
                elements.append(int(digits))
                self.take("]")
        return tuple(elements)

    def value(self) -> Value:
        token = self.take()
        if not token.startswith(":"):
            raise self.error(f'Syntax error; token: "{token}"')
        if self.ph.values is None or token not in self.ph.values:
            raise self.error(
                f"An expression attribute value used in expression is not defined; attribute value: {token}"
            )
        self.ph.used_values.add(token)
        return check_value(self.ph.values[token], token)

    def operand(self) -> Operand:
        token = self.peek() or ""
        if token.startswith(":"):
            return Operand("value", value=self.value())
        if token == "size" and self.peek(1) == "(":
            self.at += 2
            path = self.path()
            self.take(")")
            return Operand("size", path=path)
        return Operand("path", path=self.path())

    def _closing(self, at: int) -> int:
        """The index of the ``)`` that closes the ``(`` at ``at`` (past the end if none does)."""
        depth = 0
        for index in range(at, len(self.tokens)):
            depth += {"(": 1, ")": -1}.get(self.tokens[index], 0)
            if depth == 0:
                return index
        return len(self.tokens)

    # -- conditions
    def condition(self) -> Condition:
        parts = [self.conjunction()]
        while self.keyword("OR"):
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else Condition("OR", tuple(parts))

    def conjunction(self) -> Condition:
        parts = [self.negation()]
        while self.keyword("AND"):
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else Condition("AND", tuple(parts))

    def negation(self) -> Condition:
        if self.keyword("NOT"):
            return Condition("NOT", (self.negation(),))
        if self.peek() == "(":
            self.take("(")
            if self.peek() == "(" and self.peek(self._closing(self.at) - self.at + 1) == ")":
                raise self.error("The expression has redundant parentheses;")
            inner = self.condition()
            self.take(")")
            return inner
        token = self.peek() or ""
        if self.peek(1) == "(" and token != "size":
            if token not in _CONDITION_FUNCTIONS:
                raise self.error(f"Invalid function name; function: {token}")
            self.at += 2
            args = [self.operand()]
            while self.peek() == ",":
                self.take(",")
                args.append(self.operand())
            self.take(")")
            return Condition(token, tuple(args))
        left = self.operand()
        if self.keyword("BETWEEN"):
            low = self.operand()
            if not self.keyword("AND"):
                self.take("AND")
            return Condition("BETWEEN", (left, low, self.operand()))
        if self.keyword("IN"):
            self.take("(")
            options = [self.operand()]
            while self.peek() == ",":
                self.take(",")
                options.append(self.operand())
            self.take(")")
            return Condition("IN", (left, *options))
        comparator = self.take()
        if comparator not in _COMPARATORS:
            self.at -= 1
            self.take("<comparator>")
        return Condition(comparator, (left, self.operand()))

    # -- updates
    def term(self) -> Operand:
        token = self.peek() or ""
        if token in ("if_not_exists", "list_append") and self.peek(1) == "(":
            self.at += 2
            first = Operand("path", path=self.path()) if token == "if_not_exists" else self.term()
            self.take(",")
            second = self.term()
            self.take(")")
            return Operand(token, args=(first, second))
        if token.startswith(":"):
            return Operand("value", value=self.value())
        return Operand("path", path=self.path())

    def update(self) -> Update:
        sets: list[tuple[Path, Operand]] = []
        removes: list[Path] = []
        adds: list[tuple[Path, Value]] = []
        deletes: list[tuple[Path, Value]] = []
        seen: set[str] = set()
        while self.peek() is not None:
            clause = self.keyword(*_CLAUSES)
            if clause is None:
                self.take("<clause>")
            if clause in seen:
                raise self.error(f'The "{clause}" section can only be used once in an update expression;')
            seen.add(str(clause))
            while True:
                path = self.path()
                if clause == "SET":
                    self.take("=")
                    term = self.term()
                    if self.peek() in ("+", "-"):
                        term = Operand(self.take(), args=(term, self.term()))
                    sets.append((path, term))
                elif clause == "REMOVE":
                    removes.append(path)
                else:
                    (adds if clause == "ADD" else deletes).append((path, self.value()))
                if self.peek() != ",":
                    break
                self.take(",")
        return Update(tuple(sets), tuple(removes), tuple(adds), tuple(deletes))


def parse_condition(text: str, kind: str, placeholders: Placeholders) -> Condition:
    """A ConditionExpression or FilterExpression (``kind`` names it in errors)."""
    parser = _Parser(text, kind, placeholders)
    condition = parser.condition()
    parser.end()
    return condition


def parse_update(text: str, placeholders: Placeholders) -> Update:
    parser = _Parser(text, "UpdateExpression", placeholders)
    update = parser.update()
    parser.end()
    return update


def parse_projection(text: str, placeholders: Placeholders) -> list[Path]:
    parser = _Parser(text, "ProjectionExpression", placeholders)
    paths = [parser.path()]
    while parser.peek() == ",":
        parser.take(",")
        paths.append(parser.path())
    parser.end()
    for i, one in enumerate(paths):
        for two in paths[i + 1 :]:
            if one[: len(two)] == two or two[: len(one)] == one:
                raise parser.error(overlap(one, two))
    return paths


def overlap(one: Path, two: Path) -> str:
    show = ("[" + ", ".join(str(p) for p in path) + "]" for path in (one, two))
    return (
        "Two document paths overlap with each other; must remove or rewrite one of these paths; path one: {}, "
        "path two: {}".format(*show)
    )
