"""A Griffe extension for the documentation site (mkdocs.yml): the API reference shows what a user writes and
reads, not how the code is built.

- an attrs field (``name: T = attrs.field(default=DEFAULT_X, converter=..., validator=...)``) shows as
  ``name: T = <default>``: the value of ``default`` (a module constant it names is replaced by its value),
  ``factory()`` for a ``factory``, and no value for a field without a default;
- an attribute set in ``__init__`` only (``self.url = url``) shows with no value: the right-hand side is
  ``__init__``'s code, not a default;
- the objects named in ``hidden`` (canonical paths, such as ``kinsumer.record.Record.from_api``: public to
  the code that builds them, of no use to a user) are left out.

Configured in mkdocs.yml::

    extensions:
      - scripts/griffe_public_api.py:PublicApi:
          hidden: [kinsumer.consumer.Kinsumer.tables, ...]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from griffe import Attribute, Expr, ExprCall, ExprKeyword, ExprName, Extension, GriffeLoader, Object

__all__ = ["PublicApi", "field_default"]

#: The names an attrs field is made with.
FIELD_CALLS = frozenset({"attrs.field", "attr.ib", "attr.attrib", "attrs.attrib", "field"})
#: An attribute's labels when it is assigned in ``__init__`` and nowhere in the class body.
INSTANCE_ONLY = frozenset({"instance-attribute"})


def _keyword(call: ExprCall, name: str) -> str | Expr | None:
    for argument in call.arguments:
        if isinstance(argument, ExprKeyword) and argument.name == name:
            return argument.value
    return None


def _constant(value: str | Expr, scope: Object) -> str | Expr:
    """``value``, or the value of the module constant it names (one level: ``DEFAULT_X = 0.25`` gives 0.25)."""
    if isinstance(value, ExprName):
        module = scope.module
        constant = module.members.get(value.name)
        if isinstance(constant, Attribute) and constant.value is not None:
            return constant.value
    return value


def field_default(attribute: Attribute) -> tuple[bool, str | Expr | None]:
    """Whether ``attribute``'s value is an attrs field, and the default to show for it (None: it has none)."""
    value = attribute.value
    if not isinstance(value, ExprCall) or str(value.function) not in FIELD_CALLS:
        return False, None
    default = _keyword(value, "default")
    if default is not None:
        return True, _constant(default, attribute)
    factory = _keyword(value, "factory")
    if factory is not None:
        return True, f"{factory}()"
    return True, None


class PublicApi(Extension):
    """See the module's description."""

    def __init__(self, hidden: Iterable[str] = ()) -> None:
        super().__init__()
        self.hidden = frozenset(hidden)

    def on_object(self, *, obj: Object, loader: GriffeLoader, **kwargs: Any) -> None:
        parent = obj.parent
        if obj.path in self.hidden and parent is not None:
            del parent.members[obj.name]
            return
        if not isinstance(obj, Attribute) or parent is None or not parent.is_class:
            return
        is_field, default = field_default(obj)
        if is_field:
            obj.value = default
        elif set(obj.labels) == INSTANCE_ONLY:
            obj.value = None
