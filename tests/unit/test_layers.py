"""kinsumer's imports flow down its layers: a module imports only from its own layer and the ones below.

The layers, from the bottom (docs/how-it-works.md draws them):

1. base: the values every layer speaks of (errors, records, failures, the stat hooks, the
   configuration and its defaults, waiting helpers);
2. ``aws``: the AWS calls and their answers (retries, tables, the lean HTTP paths);
3. ``reading``: reading one shard (polling, fan-out, KPL, positions, the frontier, the event loop);
4. ``writing``: writing records to a stream (KPL aggregation);
5. ``delivery``: from the readers to ``next*()`` (the queue, progress and checkpoints);
6. ``handling``: ``process()`` (attempts, the scheduler, the crash-loop guard, hooks);
7. ``coordination``: who reads which shard (membership, leases, the shard workers);
8. the front: the public class and what sits beside it (``consumer``, ``running``, ``admin``, ``asyncio_front``,
   ``dead_letter``, ``status``, ``metrics``, ``health``, the package itself);
9. the applications: the command line, the Spark source and sink, and the testing kit.

Every import counts: at the top, in a function, or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kinsumer"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("kinsumer.errors", "kinsumer.record", "kinsumer.failure", "kinsumer.stats", "kinsumer.waiting",
              "kinsumer.clock", "kinsumer.config", "kinsumer._version")),
    ("aws", ("kinsumer.aws",)),
    ("reading", ("kinsumer.reading",)),
    ("writing", ("kinsumer.writing",)),
    ("delivery", ("kinsumer.delivery",)),
    ("handling", ("kinsumer.handling", "kinsumer.handling.tracing")),
    ("coordination", ("kinsumer.coordination",)),
    ("front", ("kinsumer", "kinsumer.consumer", "kinsumer.running", "kinsumer.admin", "kinsumer.asyncio_front",
               "kinsumer.dead_letter", "kinsumer.dead_letters", "kinsumer.status", "kinsumer.metrics",
               "kinsumer.otel_metrics", "kinsumer.health", "kinsumer.processing")),
    ("applications", ("kinsumer.cli", "kinsumer.spark", "kinsumer.testing", "kinsumer.__main__")),
]  # fmt: skip


def layer_of(module: str) -> int:
    """The index of ``module``'s layer: that of the longest name in :data:`LAYERS` it is or lies under."""
    best, best_length = -1, -1
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_length:
                best, best_length = index, len(name)
    if best < 0:
        raise LookupError(f"{module} is in no layer: add it to LAYERS (and to docs/how-it-works.md)")
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, module: str, is_package: bool, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module) of each kinsumer module ``source`` imports: a name imported from a package counts as
    the submodule it names, if there is one, else as the package."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                yield node.lineno, full if full in known else target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
    return


def upward_imports(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """Each import of ``sources`` (module → (source, is a package)) that runs from a layer up to a higher one."""
    known = set(sources)
    found = []
    for module, (source, is_package) in sorted(sources.items()):
        for line, target in imported(source, module, is_package, known):
            if target != "kinsumer" and not target.startswith("kinsumer."):
                continue
            if layer_of(target) > layer_of(module):
                found.append(
                    f"{module}:{line} imports {target} "
                    f"({LAYERS[layer_of(module)][0]} -> {LAYERS[layer_of(target)][0]})"
                )
    return found


def package_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(p): (p.read_text(), p.name == "__init__.py") for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_is_in_a_layer() -> None:
    for module in package_sources():
        layer_of(module)  # raises, naming the module


def test_no_import_runs_up_a_layer() -> None:
    assert upward_imports(package_sources()) == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("kinsumer.errors", "from .handling.failure import Failure\n"),  # base -> handling
        ("kinsumer.delivery.progress", "if TYPE_CHECKING:\n    from ..handling.guard import ShardGuard\n"),
        ("kinsumer.reading.fanout", "def f():\n    from ..coordination import shard_pool\n"),  # in a function
        ("kinsumer.aws.kinesis", "import kinsumer.reading.frontier\n"),
        ("kinsumer.handling.guard", "from .. import consumer\n"),  # a module named through its package
    ],
)
def test_the_check_finds_an_import_that_runs_up(module: str, source: str) -> None:
    sources = package_sources()
    sources[module] = (sources[module][0] + source, False)
    found = upward_imports(sources)
    assert len(found) == 1 and found[0].startswith(module), found
