# The two commands: `make demo` and `make test`. Each builds .venv itself.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo lint typecheck unit clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,demo]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m ruff check kinsumer tests scripts
	$(PY) -m mypy
	$(PY) -m pytest

unit: $(STAMP)
	$(PY) -m pytest tests/unit tests/aws

lint: $(STAMP)
	$(PY) -m ruff check kinsumer tests scripts

typecheck: $(STAMP)
	$(PY) -m mypy

demo: $(STAMP)
	$(PY) -m kinsumer.demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
