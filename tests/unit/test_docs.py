"""The documentation: the site builds with ``mkdocs build --strict`` (no broken link or anchor, no page
left out of the navigation, no API name that no longer exists), the README stays a front door
whose links lead somewhere, and the glossary's modules exist."""

from __future__ import annotations

import html
import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
#: The README is the front door; the rest lives in docs/.
README_MAX_BYTES = 15 * 1024
#: A Markdown link's target, outside code spans and blocks (which the README's links never are in).
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
#: A module named in the glossary, by its path under kinsumer/ (``coordination/lease.py``).
MODULE_PATH = re.compile(r"`(?P<path>[a-z_]+(?:/[a-z_]+)*\.py)`")


def test_the_site_builds_with_strict(tmp_path: pathlib.Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner, not a problem of ours
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"
    consumer = text_of(tmp_path / "site" / "api" / "consumer" / "index.html")
    # the API reference shows users' names: Config's fields as their type and default, not how attrs makes them
    assert "throttle_delay: float = 0.25" in consumer and "stats: StatReceiver = StatReceiver()" in consumer
    assert "max_buffered_bytes: int = 64 * 2 ** 20" in consumer
    for internal in ("attrs.field", "DEFAULT_", "_as_float", "__attrs_post_init__", "effective_client_record_max_age",
                     "from_api", "Tables.for_application", "uuid.uuid4", "StreamScope"):  # fmt: skip
        assert internal not in consumer, internal
    assert "kinsumer.ResetPlan" in consumer and "past_retention: bool" in consumer
    dead_letter = text_of(tmp_path / "site" / "api" / "dead-letter" / "index.html")
    assert "VERSION = 1" not in dead_letter and "url = url" not in dead_letter
    observability = text_of(tmp_path / "site" / "api" / "observability" / "index.html")
    assert "interval = float(interval)" not in observability


def text_of(page: pathlib.Path) -> str:
    """A built page's text as a reader sees it: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_the_readme_is_a_front_door_whose_relative_links_exist() -> None:
    readme = REPO / "README.md"
    assert readme.stat().st_size <= README_MAX_BYTES, "README.md grew past a front door: move the detail to docs/"
    targets = [match["target"] for match in LINK.finditer(readme.read_text())]
    local = [target.split("#", 1)[0] for target in targets if not re.match(r"[a-z]+:", target)]
    assert local, "the README links to no page of docs/"
    missing = [target for target in local if not (REPO / target).is_file()]
    assert missing == []


def test_the_glossary_names_modules_that_exist() -> None:
    glossary = (REPO / "docs" / "glossary.md").read_text()
    paths = {match["path"] for match in MODULE_PATH.finditer(glossary)}
    assert paths, "the glossary names no module"
    assert sorted(path for path in paths if not (REPO / "kinsumer" / path).is_file()) == []


def test_the_api_reference_documents_every_public_name() -> None:
    import kinsumer

    documented = set()
    for page in (REPO / "docs" / "api").glob("*.md"):
        documented |= set(re.findall(r"^::: kinsumer\.(\w+)$", page.read_text(), re.MULTILINE))
    missing = sorted(set(kinsumer.__all__) - documented - {"__version__"})
    assert missing == [], f"add these to a page of docs/api/: {missing}"
