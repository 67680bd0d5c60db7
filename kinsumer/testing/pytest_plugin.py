"""pytest fixtures for testing a handler on :mod:`kinsumer.testing`, loaded by pytest wherever pykinsumer is
installed (the ``pytest11`` entry point ``kinsumer``; ``-p no:kinsumer`` leaves it out).

- ``kinsumer_stream``: a :class:`~kinsumer.testing.LocalStream` on a :class:`~kinsumer.testing.LocalAWS` of
  the test's own, named after the test; 2 shards, or as ``@pytest.mark.kinsumer_stream(shards=N)`` says;
- ``kinsumer_fleet``: a factory, ``kinsumer_fleet(handler, application="app", config=FAST_CONFIG, **options)``,
  of :class:`~kinsumer.testing.Fleet` on that stream (``options`` go to ``process()``); each fleet made is
  closed at the test's end (its clients stop; an error a client's ``process()`` raised fails the test).

The module imports :mod:`kinsumer.testing` only when a fixture is used, so that loading the plugin costs a
test session that does not use it nothing.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from ..config import Config
    from ._fleet import Fleet
    from ._local import LocalStream

__all__ = ["FleetFactory", "kinsumer_fleet", "kinsumer_stream", "pytest_configure"]

_MARKER = "kinsumer_stream"
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_streams = itertools.count(1)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{_MARKER}(shards=2): the shards of the test's kinsumer_stream")


class FleetFactory(Protocol):
    """What ``kinsumer_fleet`` is: makes a :class:`~kinsumer.testing.Fleet` on the test's stream."""

    def __call__(
        self, handler: Callable[..., object], *, application: str = "app", config: Config | None = None,
        **options: Any,
    ) -> Fleet: ...  # fmt: skip


@pytest.fixture
def kinsumer_stream(request: pytest.FixtureRequest) -> LocalStream:
    """A stream in memory (:class:`~kinsumer.testing.LocalStream`), on a LocalAWS of this test's own."""
    from ._local import LocalAWS  # noqa: PLC0415 - imported when used: see the module's description

    marker = request.node.get_closest_marker(_MARKER)
    options = dict(marker.kwargs) if marker is not None else {}
    shards = options.pop("shards", 2)
    if marker is not None and (marker.args or options):
        raise pytest.UsageError(
            f"@pytest.mark.{_MARKER}: takes shards=N only, not {marker.args or ''}{options or ''} "
            f"({request.node.nodeid})"
        )
    name = f"{_NAME.sub('-', request.node.name)[:100]}-{next(_streams)}"  # 1-128 of A-Z a-z 0-9 _ . -
    return LocalAWS().stream(name, shards)


@pytest.fixture
def kinsumer_fleet(kinsumer_stream: LocalStream) -> Iterator[FleetFactory]:
    """Makes fleets on ``kinsumer_stream``; each is closed at the test's end."""
    from ._fleet import FAST_CONFIG, Fleet  # noqa: PLC0415 - imported when used: see the module's description

    fleets: list[Fleet] = []

    def make(
        handler: Callable[..., object], *, application: str = "app", config: Config | None = None, **options: Any
    ) -> Fleet:
        stream = kinsumer_stream
        fleet = Fleet(stream.aws, stream.name, application, handler, config=config or FAST_CONFIG, **options)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in reversed(fleets):
        fleet.close()
