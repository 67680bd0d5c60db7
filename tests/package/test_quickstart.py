"""The README's "Try it locally" runs as written, from the built wheel: the docs are the test.

The section's code blocks are read from README.md and run as a user types them, with two changes only:
``pykinsumer`` in the ``pip install`` line is the wheel built from this checkout (the name is not on PyPI
yet, and the test is of this version), and moto's port 5000 is a free port of 127.0.0.1 (5000 may be
taken here). The install goes into a bare virtual environment (``venv --without-pip``; this test's pip
installs into it, with ``--no-compile``, which only saves the time of compiling moto's modules ahead).
The ``moto_server`` line is started by the test and stopped by it; the other shell blocks run in order in
one bash, as in the user's second terminal, with the environment's ``bin`` first on ``PATH`` and no AWS
setting but the ones the blocks export; the Python block is ``first.py``, in that shell's directory.

About 40 s: installing the wheel and moto[server] (about 12 s), and the program's two runs, each ending
after 10 s without a record, as the README says.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass

import boto3

from tests.helpers import wait_until
from tests.package.environments import DISTRIBUTION, REPO, BareEnvironment, Distributions, environ

SECTION = "## Try it locally"
README_PORT = 5000


def blocks(path: pathlib.Path) -> list[tuple[str, str]]:
    """The (language, code) of each fenced block of ``path``'s quick-start section, in order."""
    text = path.read_text()
    assert SECTION in text, f"{path.name} has no {SECTION!r} section"
    section = text[text.index(SECTION) + len(SECTION) :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    return re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)


@dataclass(frozen=True)
class QuickStart:
    install: list[str]  # the pip install line's arguments, after `pip install`
    server: list[str]  # the moto_server command
    terminal: str  # what the second terminal runs, in order
    program: str  # first.py


def read_quick_start(path: pathlib.Path) -> QuickStart:
    install: list[str] = []
    server: list[str] = []
    terminal: list[str] = []
    programs: list[str] = []
    for language, code in blocks(path):
        if language == "python":
            programs.append(code)
        elif "moto_server" in code:  # the first terminal: install, then the server
            for line in code.splitlines():
                words = shlex.split(line, comments=True)
                if words[:2] == ["pip", "install"]:
                    install = words[2:]
                elif words[:1] == ["moto_server"]:
                    server = words
                else:
                    assert not words, f"the quick start's first block has a line this test cannot run: {line!r}"
        else:
            assert language == "sh", f"a {language} block in the quick start"
            terminal.append(code)
    assert DISTRIBUTION in install and server and len(programs) == 1 and terminal
    return QuickStart(install, server, "".join(terminal), programs[0])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_the_docs_quick_start_is_the_readmes() -> None:
    """docs/index.md shows the same steps: this test runs the README's."""
    assert blocks(REPO / "docs" / "index.md") == blocks(REPO / "README.md")


def test_the_readmes_quick_start_runs_as_written_from_the_wheel(
    distributions: Distributions, tmp_path: pathlib.Path
) -> None:
    steps = read_quick_start(REPO / "README.md")
    assert "`first.py`" in (REPO / "README.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    stream = re.search(r'stream_name="([^"]+)"', steps.program).group(1)  # type: ignore[union-attr]
    app = re.search(r'application_name="([^"]+)"', steps.program).group(1)  # type: ignore[union-attr]
    port = free_port()
    assert steps.server[-2:] == ["-p", str(README_PORT)] and f"127.0.0.1:{README_PORT}" in steps.terminal
    server_command = [*steps.server[:-1], str(port)]
    terminal = steps.terminal.replace(f"127.0.0.1:{README_PORT}", f"127.0.0.1:{port}")

    environment = BareEnvironment(tmp_path / "venv")
    wheel_for_name = [str(distributions.wheel) if word == DISTRIBUTION else word for word in steps.install]
    environment.pip("install", "--quiet", "--no-compile", *wheel_for_name)

    home = tmp_path / "try"
    home.mkdir()
    (home / "first.py").write_text(steps.program)
    log = (tmp_path / "moto.log").open("w")
    server = subprocess.Popen(
        [str(environment.bin / server_command[0]), *server_command[1:]],
        stdout=log, stderr=subprocess.STDOUT, cwd=home, env=environ(),
    )  # fmt: skip
    try:
        wait_until(lambda: answers(port) or server.poll() is not None, 60, "moto's server to listen")
        assert server.poll() is None, (tmp_path / "moto.log").read_text()
        shell_env = {k: v for k, v in environ().items() if not k.startswith("AWS_")}  # only what the steps export
        shell_env.update(
            PATH=f"{environment.bin}{os.pathsep}{os.environ['PATH']}",
            AWS_CONFIG_FILE=os.devnull,  # and not the machine's own AWS files
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        )
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", terminal],
            cwd=home, env=shell_env, capture_output=True, text=True, check=False, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, f"the quick start failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        runs = what_the_runs_printed(done.stdout)
        db = boto3.client("dynamodb", endpoint_url=f"http://127.0.0.1:{port}")
        clients = db.scan(TableName=f"{app}_clients")["Items"]
        checkpoints = db.scan(TableName=f"{app}_checkpoints")["Items"]
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        log.close()
    assert done.stdout.startswith(f"stream {stream} is ACTIVE with 2 shards\nwrote 100 records to {stream}")
    assert [sorted(ids) for ids in runs] == [list(range(100)), list(range(100, 110))]  # each record once
    assert clients == []  # each run left the application when it ended
    assert len(checkpoints) == 2  # a checkpoint per shard: why the second run printed only the new records


def what_the_runs_printed(stdout: str) -> list[list[int]]:
    """The ids each run of first.py printed: the lines ``<shard> <record as JSON>`` up to its last line."""
    runs: list[list[int]] = [[]]
    for line in stdout.splitlines():
        if line == "no record for 10 s: done":
            runs.append([])
        elif line.startswith("shardId-"):
            shard, data = line.split(" ", 1)
            body = json.loads(data)
            assert shard in ("shardId-000000000000", "shardId-000000000001")
            assert body["key"] == f"key-{body['id'] % 100}"  # kinsumer produce's default 100 keys
            runs[-1].append(body["id"])
    assert runs[-1] == [], f"the last run did not end as the README says:\n{stdout[-2000:]}"
    return runs[:-1]
