"""What a type checker makes of the public API, as a user's code meets it: ``mypy --strict`` on small programs."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def mypy(path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context", str(path)]
    return subprocess.run(command, check=False, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_documented_ways_of_taking_a_record_and_its_checkpoint_type_check() -> None:
    checked = mypy(REPO / "tests" / "typed" / "checkpointed.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_variables_unpacked_first_are_narrowed_each_on_its_own(tmp_path: pathlib.Path) -> None:
    """Why the docs check the pair before unpacking it: mypy does not carry one variable's check to the other."""
    program = tmp_path / "unpacked_first.py"
    program.write_text(
        "from kinsumer import Kinsumer\n"
        "def use(k: Kinsumer) -> None:\n"
        "    data, checkpoint = k.next_with_checkpointer()\n"
        "    if data is not None:\n"
        "        checkpoint()\n"
    )
    checked = mypy(program)
    assert checked.returncode == 1
    assert '"None" not callable' in checked.stdout, checked.stdout


def test_a_handler_of_decoded_values_type_checks() -> None:
    checked = mypy(REPO / "tests" / "typed" / "decoded.py")
    assert checked.returncode == 0, checked.stdout + checked.stderr
