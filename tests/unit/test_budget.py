"""The client's byte budget: granted in order, never over its limit but for one page alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinsumer.delivery.budget import ByteBudget, Ticket


def test_a_request_that_fits_is_granted_at_once_and_one_that_does_not_waits_its_turn() -> None:
    budget = ByteBudget(100)
    woken: list[str] = []
    a = budget.request(60, lambda: woken.append("a"))
    b = budget.request(60, lambda: woken.append("b"))
    c = budget.request(10, lambda: woken.append("c"))  # it would fit, but b asked first
    assert (a.granted, b.granted, c.granted) == (True, False, False)
    budget.settle(a, 50)  # a's page held less than it asked for: still no room for b
    assert not b.granted and budget.used == 50
    budget.free(50)  # a's records were taken
    assert (b.granted, c.granted) == (True, True) and woken == ["b", "c"]
    assert budget.used == 70


def test_a_request_larger_than_the_budget_goes_once_nothing_is_held() -> None:
    budget = ByteBudget(10)
    small = budget.request(5)
    big = budget.request(1000)
    assert small.granted and not big.granted
    budget.cancel(small)
    assert big.granted and budget.used == 1000


def test_a_cancelled_ticket_gives_its_bytes_back_or_leaves_the_queue() -> None:
    budget = ByteBudget(10)
    held = budget.request(10)
    queued = budget.request(10)
    budget.cancel(queued)
    assert budget.waiting == 0
    budget.cancel(held)
    assert budget.used == 0
    with pytest.raises(ValueError, match="not granted"):
        budget.settle(queued, 3)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("request"), st.integers(0, 40)),
        st.tuples(st.just("settle"), st.integers(0, 60)),
        st.tuples(st.just("cancel"), st.integers(0, 10)),
        st.tuples(st.just("free"), st.integers(0, 10)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(1, 50), ops=operations)
def test_the_budget_accounts_every_byte_grants_in_order_and_exceeds_its_limit_only_by_one_lone_ticket(
    limit: int, ops: list[tuple[str, int]]
) -> None:
    budget = ByteBudget(limit)
    asked: list[Ticket] = []  # in the order they were requested
    granted_order: list[Ticket] = []
    held: list[int] = []  # bytes of settled pages, not yet freed
    for op, n in ops:
        if op == "request":
            ticket = budget.request(n, lambda: None)
            asked.append(ticket)
        elif op == "settle":
            open_tickets = [t for t in asked if t.granted]
            if open_tickets:
                budget.settle(open_tickets[0], n)
                held.append(n)
        elif op == "cancel" and asked:
            budget.cancel(asked[n % len(asked)])
        elif op == "free" and held:
            budget.free(held.pop(n % len(held)))
        for ticket in asked:
            if ticket.granted and ticket not in granted_order:
                granted_order.append(ticket)
        in_tickets = sum(t.amount for t in asked if t.granted)
        assert budget.used == in_tickets + sum(held)  # every byte accounted for
        waiting = [t for t in asked if not t.granted and t.amount and t not in granted_order]
        if waiting:  # something waits only because the budget is held, and it would not fit
            assert budget.used > 0 and budget.used + waiting[0].amount > limit
    # first come, first served: tickets were granted in the order they were asked for
    positions = [asked.index(t) for t in granted_order]
    assert positions == sorted(positions)
