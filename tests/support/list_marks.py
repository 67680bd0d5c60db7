"""A pytest plugin for a collection's listing: each test's node ID and the names of its marks, as JSON lines
in the file ``KINSUMER_LIST_MARKS`` names (``pytest --collect-only -p tests.support.list_marks``)."""

from __future__ import annotations

import json
import os

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    with open(os.environ["KINSUMER_LIST_MARKS"], "w") as out:
        for item in session.items:
            out.write(json.dumps({"id": item.nodeid, "marks": sorted({m.name for m in item.iter_markers()})}) + "\n")
