"""The Go kinsumer (twitchscience/kinsumer) as a throughput contender, in a process of its own.

``go_kinsumer/main.go`` is built against the Go library's source: ``KINSUMER_GO_SRC`` (a
checkout) if set, else a shallow clone from GitHub. :func:`build` builds any such Go program (the
interop tier's driver, ``tests/interop/go_client/main.go``, too). Its dependencies come from the Debian
packages (``apt-get install golang-go golang-github-aws-aws-sdk-go-dev
golang-github-google-uuid-dev golang-golang-x-sync-dev``), in GOPATH mode, so no Go module
download is needed. The library's source is not kept in this repository (its license is the
Amazon Software License). Whatever is missing, the bench row says so instead of a figure.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import uuid

from .common import HERE, Measure

__all__ = ["build", "run"]

MAIN = HERE / "go_kinsumer" / "main.go"
SOURCE = "https://github.com/twitchscience/kinsumer"
DEBIAN_GOPATH = "/usr/share/gocode"
_PACKAGES = "golang-go golang-github-aws-aws-sdk-go-dev golang-github-google-uuid-dev golang-golang-x-sync-dev"


def build(work: pathlib.Path, main_go: pathlib.Path = MAIN) -> pathlib.Path | str:
    """The binary of the Go program ``main_go`` (a ``main.go`` alone in its folder; the contender by default),
    built under ``work`` against the Go library; a reason if it cannot be built."""
    go = shutil.which("go")
    if go is None:
        return f"Go is not installed (Debian: apt-get install {_PACKAGES})"
    source = work / "src" / "github.com" / "twitchscience" / "kinsumer"
    given = os.environ.get("KINSUMER_GO_SRC")
    if given:
        if not pathlib.Path(given, "kinsumer.go").is_file():
            return f"KINSUMER_GO_SRC={given} is not a checkout of {SOURCE} (it has no kinsumer.go)"
        shutil.copytree(given, source, ignore=shutil.ignore_patterns(".git"))
    else:
        cloned = subprocess.run(
            ["git", "clone", "--quiet", "--depth", "1", SOURCE, str(source)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if cloned.returncode != 0:
            return f"could not clone {SOURCE} (set KINSUMER_GO_SRC to a checkout): {_last_line(cloned.stderr)}"
    program = main_go.parent.name  # its package folder under GOPATH and its binary's name
    main = work / "src" / program
    main.mkdir(parents=True)
    shutil.copy(main_go, main / "main.go")
    binary = work / program
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{work}:{DEBIAN_GOPATH}", "GOCACHE": str(work / "cache")}
    command = [go, "build", "-o", str(binary), "."]
    built = subprocess.run(command, cwd=main, env=env, capture_output=True, text=True, timeout=600, check=False)
    if built.returncode != 0:
        return f"{main_go} did not build (Debian packages: {_PACKAGES}): {_last_line(built.stderr)}"
    return binary


def run(binary: pathlib.Path, kinesis_endpoint: str, dynamodb_endpoint: str, stream: str, total: int) -> Measure | str:
    """One Go client through ``Next()`` over ``total`` records of ``stream`` (a fresh application)."""
    command = [
        str(binary), "-kinesis", kinesis_endpoint, "-dynamodb", dynamodb_endpoint, "-stream", stream,
        "-app", f"bench-go-{uuid.uuid4().hex[:8]}", "-records", str(total),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return f"failed: {_last_line(done.stderr) or done.returncode}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Measure(
        int(result["records"]), float(result["seconds"]), startup=float(result["startup"]), cpu=float(result["cpu"])
    )


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""
