"""``kinsumer demo`` and ``kinsumer produce``: tools of a checkout of the repository, not of the package.

The demo and the test-record producer live in the repository's ``demo/`` folder, beside the
``kinsumer/`` package, so the installed package carries no demo or test-server code. These
commands find that folder next to the package they run from (an editable install, or
``python -m kinsumer`` in the checkout) and say what to do when it is not there.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
from types import ModuleType

from ..errors import KinsumerError

__all__ = ["checkout_module"]

_ROOT = pathlib.Path(__file__).resolve().parents[2]


def checkout_module(command: str, module: str) -> ModuleType:
    """Import ``module`` (``demo.app``, ``demo.producer``) from the checkout this kinsumer runs from."""
    if not (_ROOT / "demo" / "__init__.py").is_file():
        raise KinsumerError(
            f"`kinsumer {command}` comes with a checkout of the kinsumer repository, not with the installed "
            "package: clone the repository, then run `make demo` (or `.venv/bin/kinsumer "
            f"{command}`) there"
        )
    if str(_ROOT) not in sys.path:
        sys.path.insert(0, str(_ROOT))
    return importlib.import_module(module)
