"""A Griffe extension for the documentation site (mkdocs.yml): kinsumer's docstrings are written for
Sphinx, in reStructuredText, which Markdown would show as typed.

- a role (``:class:`~kinsumer.Failure```, ``:meth:`run```, ``:mod:`.batch_ends```) becomes inline code
  showing what Sphinx would show: the target as written, its last part with ``~``, the title of a
  ``title <target>`` form, with ``()`` after a method or a function;
- a paragraph ending ``text::`` ends ``text:``, and a ``::`` line of its own goes, as in Sphinx: the
  indented block that follows is a code block in Markdown too;
- an attribute documented by ``#:`` comment lines right above it (Sphinx's autodoc reads them, Griffe
  does not) gets them as its docstring.

Roles become code, not links, so a docstring naming an internal module never breaks the site's
``--strict`` build when that module moves.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Docstring, Extension, GriffeLoader, Object

__all__ = ["SphinxMarkup", "comment_docstring", "markdown_of"]

ROLE = re.compile(r":(?:py:)?(?P<kind>class|meth|func|mod|attr|data|exc|obj):`(?P<target>[^`]+)`")
CALLABLES = frozenset({"meth", "func"})
TITLED = re.compile(r"^(?P<title>.+?)\s*<[^<>]+>$")
LITERAL_MARK = re.compile(r"(?m)^(?P<text>.*\S)::$")
LONE_LITERAL_MARK = re.compile(r"(?m)^[ \t]*::[ \t]*\n")
DOC_COMMENT = "#:"


def _shown(match: re.Match[str]) -> str:
    """What Sphinx shows for one role, as inline code."""
    target = match["target"].strip()
    titled = TITLED.match(target)
    if titled:
        return f"`{titled['title']}`"
    shortened = target.startswith("~")
    target = target.lstrip("~").lstrip(".")
    if shortened:
        target = target.rsplit(".", 1)[-1]
    if match["kind"] in CALLABLES and not target.endswith(")"):
        target += "()"
    return f"`{target}`"


def markdown_of(docstring: str) -> str:
    """The docstring with its roles and literal-block marks in Markdown."""
    text = ROLE.sub(_shown, docstring)
    text = LONE_LITERAL_MARK.sub("", text)
    return LITERAL_MARK.sub(lambda match: match["text"] + ":", text)


def comment_docstring(source: list[str], lineno: int) -> str | None:
    """The ``#:`` comment lines right above line ``lineno`` (1-based) of ``source``, as a docstring."""
    comments: list[str] = []
    index = lineno - 2
    while index >= 0 and source[index].strip().startswith(DOC_COMMENT):
        comments.append(source[index].strip()[len(DOC_COMMENT) :].strip())
        index -= 1
    return "\n".join(reversed(comments)) or None


class SphinxMarkup(Extension):
    """Gives ``#:``-documented attributes their docstrings, and rewrites every docstring with
    :func:`markdown_of`."""

    def on_object(self, *, obj: Object, loader: GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is None and obj.is_attribute and obj.lineno is not None:
            filepath = obj.filepath
            if not isinstance(filepath, list) and filepath in obj.lines_collection:
                text = comment_docstring(obj.lines_collection[filepath], obj.lineno)
                if text is not None:
                    obj.docstring = Docstring(
                        text,
                        lineno=obj.lineno,
                        parent=obj,
                        parser=loader.docstring_parser,
                        parser_options=loader.docstring_options,
                    )
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
