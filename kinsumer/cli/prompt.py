"""Usage errors and confirmations of the command line."""

from __future__ import annotations

import sys

__all__ = ["EXIT_USAGE", "confirmed", "usage"]

EXIT_USAGE = 2


def usage(message: str) -> SystemExit:
    """Print a usage error; the caller raises what this returns (exit code 2, as argparse does)."""
    print(f"kinsumer: error: {message}", file=sys.stderr)
    return SystemExit(EXIT_USAGE)


def confirmed(question: str, refusal: str, yes: bool) -> bool:
    """True if ``--yes`` was given or the user answers yes at a terminal; without one, a usage error."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise usage(f"{refusal}: pass --yes to confirm")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
