"""Quiet crashes: what kinsumer logs of the calls a crashed fleet client makes as it dies is dropped.

A fleet crashes a client by cutting it off (every call refused with :data:`~._client.CUT_OFF`); its threads
then meet those refusals and say so ("could not release...", "kinsumer stops: ... cut off"). The crash is the
test's own doing, not news: while a fleet runs, a filter on kinsumer's loggers drops the records that carry
the refusal (in the message or in the exception logged with it). Everything else is logged as ever.
"""

from __future__ import annotations

import logging

from ._client import CUT_OFF

__all__ = ["QuietCrashes"]


class QuietCrashes(logging.Filter):
    """Drops kinsumer's log records of a call refused because its client was cut off; :meth:`install` on every
    kinsumer logger, :meth:`remove` from them."""

    def __init__(self) -> None:
        super().__init__()
        self._loggers: list[logging.Logger] = []
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if CUT_OFF in record.getMessage() or (error is not None and CUT_OFF in str(error)):
            self.dropped += 1
            return False
        return True

    def install(self) -> None:
        """On ``kinsumer`` and each of its child loggers (a logger's filters see only what it logs itself)."""
        names = [n for n in list(logging.Logger.manager.loggerDict) if n.startswith("kinsumer.")]
        self._loggers = [logging.getLogger("kinsumer"), *(logging.getLogger(n) for n in sorted(names))]
        for logger in self._loggers:
            logger.addFilter(self)

    def remove(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers = []
