"""Delivering records: the bounded queue from the shard readers to ``next*()``, what was
delivered and acknowledged per shard, auto-mode completion and manual checkpoints."""

from .progress import Checkpoint

__all__ = ["Checkpoint"]
