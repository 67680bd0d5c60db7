"""The fenced Python and shell blocks of README.md and docs/, and what each one is: the docs are the test.

Every ``python`` and ``sh`` block either runs in the suite or says on purpose that it does not, in an HTML
comment on the line just above its fence (invisible on a rendered page):

- no comment: an **example**, run as a program of its own by tests/server/test_docs_examples.py against a moto
  server of its own, with no setup, and it must end by itself with status 0;
- ``<!-- example: streams=clicks,orders records=20 queues=clicks-dlq app=billing-app until=handled -->``: an
  example with a setup (each stream made with 2 shards and ``records`` records as ``kinsumer produce`` writes
  them; SQS queues; S3 ``buckets``; with ``tables``, ``app``'s tables, as ``kinsumer create-tables`` makes
  them) and, with ``until=handled``, an end: once ``app`` has checkpointed every record of every stream, the
  test presses Ctrl-C and the program must leave the application cleanly. ``spark`` runs it among the Spark tests;
- ``<!-- tested by tests/....py -->``: run as written by that test module, which reads it from this page;
- ``<!-- fragment: why -->``: not run, for the reason given (a fragment of a larger program, a command that
  installs from PyPI, a server elsewhere).

Pure: reading Markdown only, so tests/unit checks the rules in milliseconds.
"""

from __future__ import annotations

import pathlib
import re
import textwrap
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parents[1]
#: The languages whose blocks must run or say why not.
CODE_LANGUAGES = ("python", "sh")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w-]*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(?P<kind>fragment|tested by|example)\s*:?\s*(?P<rest>.*?)\s*-->\s*$")
#: The keys an ``example:`` mark takes.
EXAMPLE_KEYS = frozenset({"streams", "records", "queues", "buckets", "app", "tables", "until", "spark"})


class MarkError(ValueError):
    """A block's mark that the runner cannot follow."""


@dataclass(frozen=True)
class Block:
    page: str  # its path from the repository's top
    line: int  # the line of its opening fence, from 1
    language: str
    code: str  # dedented: a block inside a list item is indented in the Markdown
    kind: str  # "example", "tested by" or "fragment"
    detail: str = ""  # the reason of a fragment, the test module of a "tested by"
    options: dict[str, str] = field(default_factory=dict)  # an example's setup and end

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def streams(self) -> list[str]:
        return [s for s in self.options.get("streams", "").split(",") if s]

    @property
    def queues(self) -> list[str]:
        return [q for q in self.options.get("queues", "").split(",") if q]

    @property
    def buckets(self) -> list[str]:
        return [b for b in self.options.get("buckets", "").split(",") if b]

    @property
    def records(self) -> int:
        return int(self.options.get("records", "20"))

    @property
    def until(self) -> str:
        return self.options.get("until", "exit")


def pages(repo: pathlib.Path = REPO) -> list[pathlib.Path]:
    """README.md and every page of docs/ (not docs/api/: it holds no code, only mkdocstrings' directives)."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


def blocks_of(text: str, page: str) -> list[Block]:
    """The Python and shell blocks of one Markdown page, with their marks (a bad mark raises MarkError)."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        if end == len(lines):
            raise MarkError(f"{page}:{i + 1}: a fence that is never closed")
        language = opening["language"]
        if language in CODE_LANGUAGES:
            code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
            above = lines[i - 1] if i > 0 else ""
            found.append(_marked(page, i + 1, language, code, above))
        i = end + 1
    return found


def _marked(page: str, line: int, language: str, code: str, above: str) -> Block:
    where = f"{page}:{line}"
    if "<!--" in above and MARK.match(above) is None:
        raise MarkError(f"{where}: the comment above the block is no mark: {above.strip()!r}")
    mark = MARK.match(above)
    if mark is None:
        if language != "python":
            raise MarkError(f"{where}: a {language} block needs a mark: tested by, or fragment with the reason")
        return Block(page, line, language, code, "example")
    kind, rest = mark["kind"], mark["rest"]
    if kind == "fragment":
        if not rest:
            raise MarkError(f"{where}: a fragment says why it is not run")
        return Block(page, line, language, code, kind, detail=rest)
    if kind == "tested by":
        if not re.fullmatch(r"tests/[\w/]+\.py", rest):
            raise MarkError(f"{where}: 'tested by' names a test module (tests/....py), not {rest!r}")
        return Block(page, line, language, code, kind, detail=rest)
    if language != "python":
        raise MarkError(f"{where}: only a Python block can be an example")
    options = dict(word.split("=", 1) if "=" in word else (word, "yes") for word in rest.split())
    unknown = sorted(set(options) - EXAMPLE_KEYS)
    if unknown:
        raise MarkError(f"{where}: unknown example options {unknown} (known: {sorted(EXAMPLE_KEYS)})")
    block = Block(page, line, language, code, kind, options=options)
    if block.until not in ("exit", "handled"):
        raise MarkError(f"{where}: until= is exit or handled, not {block.until!r}")
    if "tables" in options and not options.get("app"):
        raise MarkError(f"{where}: tables needs app=")
    if block.until == "handled" and not (block.streams and options.get("app")):
        raise MarkError(f"{where}: until=handled needs streams= and app=")
    if not options.get("records", "0").isdigit():
        raise MarkError(f"{where}: records= is a count")
    return block


def all_blocks(repo: pathlib.Path = REPO) -> list[Block]:
    return [block for page in pages(repo) for block in blocks_of(page.read_text(), str(page.relative_to(repo)))]
