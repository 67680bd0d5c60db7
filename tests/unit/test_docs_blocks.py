"""The marks of the docs' code blocks (tests/docs_blocks.py): every Python and shell block of README.md and
docs/ runs in the suite or says why not, and a mark the runner cannot follow fails here, in milliseconds."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.docs_blocks import REPO, MarkError, all_blocks, blocks_of


def test_every_code_block_of_the_docs_is_run_or_says_why_not() -> None:
    blocks = all_blocks()  # raises MarkError on a block without a mark it needs, or a bad mark
    kinds = Counter(block.kind for block in blocks)
    assert kinds["example"] >= 9 and kinds["tested by"] >= 10, kinds
    for block in blocks:
        if block.kind == "fragment":
            assert len(block.detail) > 10, f"{block.name}: say why it is not run"
    # what the runnable ones are, page by page (pytest -rA prints it)
    for page, count in sorted(Counter(b.page for b in blocks if b.kind != "fragment").items()):
        print(f"{page}: {count} run")


def test_a_block_tested_elsewhere_names_a_test_that_reads_its_page() -> None:
    for block in all_blocks():
        if block.kind != "tested by":
            continue
        module = REPO / block.detail
        assert module.is_file(), f"{block.name}: {block.detail} does not exist"
        assert pathlike(block.page) in module.read_text(), f"{block.name}: {block.detail} never reads {block.page}"


def pathlike(page: str) -> str:
    """How a test names a page: README.md, or docs/x.md by its file name."""
    return page.rsplit("/", 1)[-1]


def test_an_unmarked_python_block_is_an_example_and_a_list_items_block_is_dedented() -> None:
    text = "1. a step:\n\n    ```python\n    print('hi')\n    ```\n"
    (block,) = blocks_of(text, "page.md")
    assert (block.kind, block.code, block.line, block.until) == ("example", "print('hi')\n", 3, "exit")


def test_marks_are_read_with_their_options() -> None:
    text = (
        "<!-- example: streams=a,b records=5 queues=q buckets=b1,b2 app=x tables until=handled -->\n"
        "```python\npass\n```\n\n"
        "<!-- fragment: a loop's lines -->\n```python\nrecord\n```\n\n"
        "<!-- tested by tests/server/test_readme.py -->\n```sh\nls\n```\n\n"
        "```json\n{}\n```\n"
    )
    example, fragment, tested = blocks_of(text, "page.md")
    assert (example.streams, example.records, example.queues, example.until) == (["a", "b"], 5, ["q"], "handled")
    assert example.buckets == ["b1", "b2"]
    assert example.options["tables"] == "yes" and example.options["app"] == "x"
    assert (fragment.kind, fragment.detail) == ("fragment", "a loop's lines")
    assert (tested.kind, tested.detail, tested.language) == ("tested by", "tests/server/test_readme.py", "sh")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("```sh\nls\n```\n", "a sh block needs a mark"),
        ("<!-- fragment -->\n```python\nx\n```\n", "says why"),
        ("<!-- example: stream=a -->\n```python\nx\n```\n", "unknown example options"),
        ("<!-- example: streams=a until=later -->\n```python\nx\n```\n", "until= is exit or handled"),
        ("<!-- example: streams=a until=handled -->\n```python\nx\n```\n", "needs streams= and app="),
        ("<!-- tested by the readme test -->\n```python\nx\n```\n", "names a test module"),
        ("<!-- example: streams=a -->\n```sh\nls\n```\n", "only a Python block"),
        ("<!-- run this -->\n```python\nx\n```\n", "no mark"),
        ("```python\nx\n", "never closed"),
    ],
)
def test_a_mark_the_runner_cannot_follow_is_refused_naming_the_block(text: str, says: str) -> None:
    with pytest.raises(MarkError, match=says) as refused:
        blocks_of(text, "page.md")
    assert str(refused.value).startswith("page.md:")
