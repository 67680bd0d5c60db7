"""The simulator checked against reality (issue 40): one scenario, run by ``tests/sim`` (kinsumer's own
coordination on virtual time, :mod:`tests.sim.agreement`) and by real Kinsumer clients on moto's server, over 8
and over 128 shards. Client A starts alone; client B joins as one of A's rounds ends; once each client holds its
share, a steady window with both, from the end of one of A's rounds.

What is compared, and what agreement means:

- The join time in rounds: once the assignment converged (every shard wanted by exactly one client as modulo
  gives it, A alone leading), the most rounds either client made until it wanted its share, B's counted from its
  first (in ``run()``), A's from its first round that began once B's ``run()`` returned (none, if a round under
  way then already saw B); counted discretely on both sides (the real rounds by wrapping ``Coordinator.tick``),
  so a slow machine neither stretches it as it stretches seconds nor shifts it by a round (B's rounds alone did:
  a leader's round slowed by load ended after B's second, and the join counted 2 against 1 once). A round count
  is a small integer, where 20% is less than one round, so
  within 20% is ``|real - sim| <= 0.2 * sim``: equal, for counts under 5. As B's start may fall anywhere between
  two of A's rounds in reality, the simulator joins B at several phases of A's period; the real count must agree
  with the simulator's at one of them (it gives the same count at all of them).
- DynamoDB calls a minute of each client in the window (A, the leader; B, a follower), counted per client (the
  real side through ``StatReceiver.dynamodb_call``, the simulator through botocore's ``after-call`` on its
  client): the real figure within 20% of the simulator's. Idle shards write no checkpoint, so these are the
  coordination's calls on both sides. The rate of a timer-driven client is set by its timers, so the timings
  make the count in a window exact rather than cut at its edges: each client's window is 22 of its own rounds
  (11 s at its period), from the end of one to the end of the 22nd after (waited for, not slept), and every
  periodic call comes every round (heartbeat, membership) or every 11 rounds (the leader's cache refresh, its
  lease renewal, a follower's cache read: 5 s; :mod:`tests.sim.agreement`). What a loaded machine can change:
  a round that takes longer than its period (moto's Scan of 128 rows, under load) stretches the window's
  seconds, not its rounds (the heartbeat, on its own thread, may fit one beat more or less in them); moto does
  not throttle, so there is no backoff; the failure message gives each side's calls by operation and how long
  each window took. ``client_record_max_age`` is 10 s, not the tier's 2 s: a heartbeat must land 4.5 s late
  before the leases need confirming with a write each (64 at 128 shards: a loaded machine's doing, not the
  coordination's rate); ``idle_poll_interval`` is 10 s, so that 128 idle shards poll moto 13 times a second,
  not 128 (the simulator reads no shard).

Not compared: the join's lease handoff (A releasing B's shards, B capturing them), as the simulator does not run
shard workers yet (the real side waits for it before the window, and reports B's rounds until then); the
calls of A alone (a window more, for a figure the two-client window already checks for the leader).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import attrs
import pytest

from demo.servers import LocalServer
from kinsumer import Config, Kinsumer
from kinsumer.aws.kinesis import list_shards
from kinsumer.coordination.assignment import assigned_shards
from kinsumer.coordination.coordinator import Coordinator
from tests.helpers import DynamoDBCalls, wait_until
from tests.sim.agreement import JoinFigures, Window, simulate_join

pytestmark = pytest.mark.server

#: The same on both sides (see the docstring).
CONFIG = Config(
    shard_check_frequency=0.5, leader_action_frequency=5.0, client_record_max_age=10.0, idle_poll_interval=10.0
)
FIRST, SECOND = "client-a", "client-b"  # A sorts first: it leads throughout
WINDOW_ROUNDS = 22  # rounds of the steady window: twice the 11 rounds of the slowest call
WINDOW = WINDOW_ROUNDS * CONFIG.shard_check_frequency  # its seconds, as the simulator measures it
SETTLE = 2 * CONFIG.shard_check_frequency  # seconds after the shards are held (or A starts), before the window
PHASES = (0.0, 0.25, 0.5, 0.75)  # where in A's period B joins, on the simulator
TOLERANCE = 0.2


@attrs.frozen
class Round:
    """One real membership round, as it ended."""

    client: str
    started: float  # monotonic
    ended: float
    wanted: frozenset[str]
    leading: bool


class Rounds:
    """Every membership round of the real clients, in the order they end (``Coordinator.tick`` wrapped)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._done = threading.Condition()
        self.log: list[Round] = []
        original = Coordinator.tick

        def tick(coordinator: Coordinator, deadline: float | None = None) -> None:
            started = time.monotonic()
            try:
                original(coordinator, deadline)
            finally:
                wanted = frozenset(w.shard_id for w in coordinator.workers())
                ended = Round(coordinator._rt.client_id, started, time.monotonic(), wanted, coordinator.is_leader)
                with self._done:
                    self.log.append(ended)
                    self._done.notify_all()

        monkeypatch.setattr(Coordinator, "tick", tick)

    def ends(self, client: str) -> list[float]:
        """When each of ``client``'s rounds ended (monotonic), in order."""
        with self._done:
            return [r.ended for r in self.log if r.client == client]

    def of(self, client: str) -> int:
        with self._done:
            return sum(1 for r in self.log if r.client == client)

    def wait(self, client: str, count: int, timeout: float) -> None:
        """Until ``client`` has ended ``count`` rounds."""
        with self._done:
            if not self._done.wait_for(lambda: sum(1 for r in self.log if r.client == client) >= count, timeout):
                raise AssertionError(f"{client} did not end {count} rounds within {timeout:g} s")

    def join_rounds(self, first: str, second: str, joined: float, until: float) -> int:
        """The rounds the join took, as the simulator counts them: the most rounds either client made until it
        wanted its share at ``until`` (monotonic: when the assignment converged), the joining one's from its
        first, the first one's from its first round that began at ``joined`` or later (none, if a round under
        way as the other joined already saw it: a loaded machine may time one either way)."""
        with self._done:
            log = [r for r in self.log if r.ended <= until]
        needed = []
        for client, since in ((second, -math.inf), (first, joined)):
            rounds = [r for r in log if r.client == client]
            final = rounds[-1].wanted
            before = [r for r in rounds if r.started < since]
            if before and before[-1].wanted == final:
                needed.append(0)
                continue
            counted = [r for r in rounds if r.started >= since]
            needed.append(next(i for i, r in enumerate(counted, 1) if r.wanted == final))
        return max(needed)

    def converged(self, shards: list[str], clients: list[str]) -> tuple[int, float] | None:
        """The rounds of the last of ``clients`` (which joins last) when every one of them, as of its last
        round, wanted exactly its modulo share and the first alone led, and when (monotonic); None: not yet."""
        shares = [frozenset(assigned_shards(shards, i, len(clients))) for i in range(len(clients))]
        latest: dict[str, Round] = {}
        joining = 0
        with self._done:
            for ended in self.log:
                latest[ended.client] = ended
                joining += ended.client == clients[-1]
                if len(latest) < len(clients):
                    continue
                rounds = [latest[c] for c in clients]
                if [r.wanted for r in rounds] == shares and [r.leading for r in rounds] == [True] + [False] * (
                    len(clients) - 1
                ):
                    return joining, ended.ended
        return None


@attrs.frozen
class Real:
    """What the real run measured."""

    window: Window
    join_rounds: int
    held_rounds: int  # B's rounds when each client held its share (its leases): polled, so at most one late
    window_seconds: dict[str, float]  # how long each client's window of rounds really took (a loaded machine's)


def _window(calls: dict[str, DynamoDBCalls], rounds: Rounds) -> tuple[Window, dict[str, float]]:
    """Each client's calls over ``WINDOW_ROUNDS`` of its own rounds, from the end of its last round to the end
    of the last of those (waited for, with a deadline): the simulator's window of ``WINDOW`` seconds, counted by
    the rounds a loaded machine makes rather than by a time it stretches; and how long each window really took."""
    count = {client: rounds.of(client) for client in calls}
    start = {client: rounds.ends(client)[-1] for client in calls}
    for client in calls:
        rounds.wait(client, count[client] + WINDOW_ROUNDS, 10 * WINDOW)
    end = {client: rounds.ends(client)[count[client] + WINDOW_ROUNDS - 1] for client in calls}
    window = Window(WINDOW, {client: c.between(start[client], end[client]) for client, c in calls.items()})
    return window, {client: end[client] - start[client] for client in calls}


def _holds_share(k: Kinsumer, share: frozenset[str]) -> bool:
    shards = k.status().shards
    return {s.shard_id for s in shards} == share and all(s.captured for s in shards)


def _stop(*clients: Kinsumer) -> None:
    """Stop ``clients`` at once: each hands its shards off, one write a shard, while the others do."""
    failed: list[BaseException] = []

    def stop(k: Kinsumer) -> None:
        try:
            k.stop()
        except BaseException as exc:  # reported below
            failed.append(exc)

    stopping = [threading.Thread(target=stop, args=(k,), name=f"stop-{k.client_id}") for k in clients]
    for thread in stopping:
        thread.start()
    for thread in stopping:
        thread.join(60)
    assert not [t.name for t in stopping if t.is_alive()], "a client did not stop within 60 s"
    assert not failed, failed


def run_real(server: LocalServer, stream: str, app: str, rounds: Rounds) -> Real:
    """The scenario with real clients; the clients are stopped at the end."""
    kinesis = server.client("kinesis")
    shards = sorted(s.shard_id for s in list_shards(kinesis, stream))
    calls = {FIRST: DynamoDBCalls(), SECOND: DynamoDBCalls()}

    def client(client_id: str) -> Kinsumer:
        config = attrs.evolve(CONFIG, client_id=client_id, stats=calls[client_id])
        return Kinsumer(stream, app, client_id, config, kinesis=server.client("kinesis"),
                        dynamodb=server.client("dynamodb"))  # fmt: skip

    a, b = client(FIRST), client(SECOND)
    settle = int(SETTLE / CONFIG.shard_check_frequency)
    try:
        a.run()
        wait_until(lambda: _holds_share(a, frozenset(shards)), 60, "A holding every shard")
        rounds.wait(FIRST, rounds.of(FIRST) + 1, 30)  # B starts as one of A's rounds ends
        b.run()
        joined = time.monotonic()  # B's row is written: a round of A's that begins now sees it
        wait_until(lambda: rounds.converged(shards, [FIRST, SECOND]) is not None, 30, "the assignment converging")
        shares = [frozenset(assigned_shards(shards, i, 2)) for i in range(2)]
        wait_until(lambda: _holds_share(a, shares[0]) and _holds_share(b, shares[1]), 60, "each holding its share")
        held = rounds.of(SECOND)
        rounds.wait(SECOND, held + settle, 30)
        rounds.wait(FIRST, rounds.of(FIRST) + 1, 30)  # the window starts as one of A's rounds ends
        window, took = _window(calls, rounds)
    finally:
        _stop(a, b)
    converged = rounds.converged(shards, [FIRST, SECOND])
    assert converged is not None
    return Real(window, rounds.join_rounds(FIRST, SECOND, joined, converged[1]), held, took)


def _seconds(took: dict[str, float]) -> dict[str, float]:
    return {client: round(seconds, 2) for client, seconds in took.items()}


def _agrees(real: float, sim: float) -> bool:
    return abs(real - sim) <= TOLERANCE * sim


def _compare(client: str, real: Window, sim: Window) -> str | None:
    """None if the two windows' rates of ``client`` agree, else why not (with both sides' calls)."""
    real_rate, sim_rate = real.per_minute(client), sim.per_minute(client)
    if _agrees(real_rate, sim_rate):
        return None
    return (
        f"{client}: real {real_rate:.0f} calls/min, simulated {sim_rate:.0f} "
        f"(real {dict(real.calls[client])}, simulated {dict(sim.calls[client])} in {real.seconds:g} s)"
    )


@pytest.mark.parametrize("shards", [8, 128])
def test_the_simulators_calls_a_minute_and_join_rounds_agree_with_real_clients_on_moto(
    moto_server: LocalServer, new_stream: Callable[[int], str], app: str, shards: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    sim: JoinFigures = simulate_join(shards, CONFIG, FIRST, SECOND, window=WINDOW, settle=SETTLE, phases=PHASES)
    real = run_real(moto_server, new_stream(shards), app, Rounds(monkeypatch))
    figures = (
        f"{shards} shards: A {real.window.per_minute(FIRST):.0f} (simulated {sim.window.per_minute(FIRST):.0f}), "
        f"B {real.window.per_minute(SECOND):.0f} (simulated {sim.window.per_minute(SECOND):.0f}) calls/min; "
        f"join: {real.join_rounds} rounds (simulated {sorted(set(sim.join_rounds.values()), key=str)}), "
        f"leases held after {real.held_rounds}; the windows took {_seconds(real.window_seconds)} s"
    )
    print(figures, {c: (dict(real.window.calls[c]), dict(sim.window.calls[c])) for c in (FIRST, SECOND)})
    disagreements = [_compare(client, real.window, sim.window) for client in (FIRST, SECOND)]
    assert not [d for d in disagreements if d], f"{figures}; {[d for d in disagreements if d]}"
    assert None not in sim.join_rounds.values(), sim.join_rounds
    assert any(_agrees(real.join_rounds, s) for s in sim.join_rounds.values() if s is not None), figures
