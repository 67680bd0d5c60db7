"""The parts of ``scripts/bench.py``: one module per benchmark."""
