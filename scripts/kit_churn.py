#!/usr/bin/env python3
"""Run a fleet of kinsumer.testing clients through joins, leaves, crashes and a split, with records flowing, and
print the figures: records, duplicates by reason, stranded records, how captures ended, wall time (issue 53).

    python scripts/kit_churn.py --clients 10 --events 50

The scenario is tests/kit/churn.py's (tests/kit/test_churn.py checks it); it exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tests.kit.churn import churn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--events", type=int, default=50, help="joins, leaves and crashes (a split comes halfway)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--seed", type=int, default=53)
    parser.add_argument("--rate", type=float, default=1000.0, help="records put a second")
    args = parser.parse_args(argv)
    logging.getLogger("kinsumer").setLevel(logging.CRITICAL)  # the crashed clients' remains say they failed
    figures = churn(args.clients, args.events, args.shards, args.seed, args.rate)
    print("\n".join(figures.lines()))
    report = figures.report
    ok = report.ok and figures.store == dict(report.revoked_by_key)
    print("checks: passed" if ok else f"checks: FAILED: {report}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
