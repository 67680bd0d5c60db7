"""Checked by ``mypy --strict`` in tests/unit/test_typing.py, never run: the ways the docs show to consume in
manual mode type-check as they are written, each narrowing the pair to a record and its Checkpoint."""

from __future__ import annotations

from kinsumer import Checkpoint, Config, Kinsumer, Record


def handle(data: bytes) -> None: ...


def handle_record(record: Record) -> None: ...


def loop(k: Kinsumer) -> None:
    """docs/consuming.md's loop: the pair checked by its checkpoint, then unpacked."""
    while (got := k.next_with_checkpointer()).checkpoint is not None:
        data, checkpoint = got
        handle(data)
        checkpoint()


def one(k: Kinsumer) -> None:
    """One record, checked by its value instead, and used by name."""
    got = k.next_record_with_checkpointer(timeout=1.0)
    if got.value is None:
        return
    handle_record(got.value)
    got.checkpoint()


def unpacked_both_checked(k: Kinsumer) -> None:
    """Unpacked first: each variable is checked on its own."""
    data, checkpoint = k.next_with_checkpointer()
    if data is not None and checkpoint is not None:
        handle(data)
        checkpoint()


def keep(checkpoints: list[Checkpoint], k: Kinsumer) -> None:
    got = k.next_with_checkpointer()
    if got.checkpoint is not None:
        checkpoints.append(got.checkpoint)


async def async_loop(k: Kinsumer) -> None:
    while (got := await k.anext_record_with_checkpointer()).checkpoint is not None:
        record, checkpoint = got
        handle_record(record)
        checkpoint()
    data = await k.anext_with_checkpointer()
    if data.checkpoint is not None:
        handle(data.value)


def iterate(k: Kinsumer) -> None:
    """``for record in k`` and ``next(k)`` give records."""
    first: Record = next(k)
    handle_record(first)
    for record in k:
        handle_record(record)


def keywords() -> Kinsumer:
    """The constructor's names by keyword, as the docs pass them."""
    return Kinsumer(stream_name="clicks", application_name="billing-app", client_name="worker-1", config=Config())
