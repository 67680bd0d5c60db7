from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer
from tests.conftest import unique
from tests.helpers import Audit, CountingStats
from tests.support.tls import Authority, TlsRelay, make_authority

pytestmark = pytest.mark.server

#: Timings for tests: membership rounds every 0.5 s, a silent client is dead after 2 s.
SERVER_CONFIG = Config(
    shard_check_frequency=0.5,
    client_record_max_age=2.0,
    commit_frequency=0.25,
    leader_action_frequency=1.0,
    handoff_timeout=5.0,
)


class Worker:
    """One Kinsumer client over HTTP with a thread calling next_record() into an Audit."""

    def __init__(
        self,
        server: LocalServer,
        stream: str | list[str],
        app: str,
        name: str,
        audit: Audit,
        config: Config = SERVER_CONFIG,
        kinesis: Any = None,
        dynamodb: Any = None,
    ) -> None:
        self.name, self.audit = name, audit
        self.stats = CountingStats()
        self.kinsumer = Kinsumer(
            stream,
            app,
            name,
            attrs.evolve(config, stats=self.stats),
            kinesis=kinesis or server.client("kinesis"),
            dynamodb=dynamodb or server.client("dynamodb"),
        )
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._consume, name=f"test-{name}", daemon=True)

    def start(self) -> Worker:
        self.kinsumer.run()
        self._thread.start()
        return self

    def _consume(self) -> None:
        try:
            while (record := self.kinsumer.next_record()) is not None:
                self.audit.add(self.name, record)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def stop(self) -> None:
        self.kinsumer.stop()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name} failed: {self.error!r}"


@pytest.fixture
def app(moto_server: LocalServer) -> Iterator[str]:
    """A fresh application name with its tables created."""
    name = unique("app")
    Kinsumer(
        "unused", name, "admin", kinesis=moto_server.client("kinesis"), dynamodb=moto_server.client("dynamodb")
    ).create_required_tables()
    yield name


@pytest.fixture
def authority(tmp_path: pathlib.Path) -> Authority:
    """A CA of the test's own and a certificate it signed for 127.0.0.1 (trusted by no client unless told)."""
    return make_authority(tmp_path)


@pytest.fixture
def tls(authority: Authority, moto_server: LocalServer) -> Iterator[TlsRelay]:
    """moto's server behind TLS on 127.0.0.1, with the certificate of ``authority``."""
    with TlsRelay(authority, moto_server.endpoint) as relay:
        yield relay
