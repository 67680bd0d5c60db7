# The two commands: `make demo` and `make test`. Each builds .venv itself.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
KINESALITE := tests/kinesalite/node_modules/.installed
KINESIS_MOCK := tests/kinesis_mock/node_modules/.installed

.PHONY: test demo spark-demo bench soak interop lint typecheck unit clean docs

# the package with its extras, and the development tools (tests/requirements.txt: tests, demo, docs);
# they are not extras a user could install
$(STAMP): setup.cfg pyproject.toml tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# a .venv made before the distribution was renamed pykinsumer holds this checkout as `kinsumer`
	$(PY) -m pip uninstall --quiet --yes kinsumer 2>/dev/null || true
	$(PY) -m pip install --quiet -e '.[spark,prometheus,otel]' -r tests/requirements.txt
	touch $(STAMP)

# the peers the benchmarks compare with, in an environment of their own
PEERS := .venv-bench-peers
$(PEERS)/.installed:
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet 'async-kinesis==3.0.1' || echo "async-kinesis could not be installed: its line will say so"
	touch $@

# kinesalite: Kinesis with real shard splits and merges, for the resharding tests
$(KINESALITE): tests/kinesalite/package.json tests/kinesalite/package-lock.json
	cd tests/kinesalite && npm ci --no-audit --no-fund --loglevel=error
	touch $(KINESALITE)

# kinesis-mock (npm kinesis-local): Kinesis with enhanced fan-out, for the SubscribeToShard tests
$(KINESIS_MOCK): tests/kinesis_mock/package.json tests/kinesis_mock/package-lock.json
	cd tests/kinesis_mock && npm ci --no-audit --no-fund --loglevel=error
	touch $(KINESIS_MOCK)

# the class-data archive the tests' Spark JVMs share (tests/support/jvm_archive.py): written once per .venv;
# without Java, or if it fails, the tests run without it
CLASS_ARCHIVE := $(VENV)/spark-classes.jsa
$(CLASS_ARCHIVE): $(STAMP)
	@$(PY) -m tests.support.jvm_archive $@ > $(VENV)/spark-classes.log 2>&1 \
		|| echo "no class-data archive for the Spark tests (see $(VENV)/spark-classes.log): they run without it"

# The emulators' installs, the archive, ruff and mypy run side by side. pytest runs on 4 workers (the tests
# mostly wait on servers and processes); the Spark tests and the client-process tests each stay on one
# worker (see tests/conftest.py). The hundreds of Python processes the tests start (clients, the command,
# Spark's workers) keep their compiled modules, even where the environment sets PYTHONDONTWRITEBYTECODE:
# else each compiles kinsumer again (0.2 s of CPU each).
test: $(STAMP)
	@$(MAKE) --no-print-directory -j4 $(KINESALITE) $(KINESIS_MOCK) $(CLASS_ARCHIVE) lint typecheck
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 4 --dist loadgroup

unit: $(STAMP)
	$(PY) -m pytest tests/unit tests/kit tests/aws

lint: $(STAMP)
	$(PY) -m ruff check kinsumer demo tests scripts

typecheck: $(STAMP)
	$(PY) -m mypy

demo: $(STAMP)
	$(PY) -m demo $(DEMO_ARGS)

# the documentation site (docs/, mkdocs.yml), served on http://127.0.0.1:8000 and rebuilt as you edit
docs: $(STAMP)
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

# a Spark pipeline (needs Java 17+) on the kinsumer source and an embedded server: local[2],
# or with SPARK=cluster a standalone cluster (a master and two 1-core workers on 127.0.0.1)
spark-demo: $(STAMP)
	$(PY) scripts/spark_pipeline.py $(if $(filter cluster,$(SPARK)),--cluster)

# benchmarks (about 10 minutes): prints a table and writes it to docs/benchmarks.md
# (BENCH_ARGS="--runs 1 --only throughput" for a quicker look; see scripts/bench.py --help)
bench: $(STAMP) $(KINESALITE) $(KINESIS_MOCK) $(PEERS)/.installed
	$(PY) scripts/bench.py $(BENCH_ARGS)

# the soak tier (not part of `make test`): two clients under churn with process() for 10 minutes
# (SOAK_MINUTES=120 for the long tier; SOAK_ARGS="--tracemalloc" and more: scripts/soak.py --help); exits 1
# on any failure, memory growing over its bound included
SOAK_MINUTES ?= 10
soak: $(STAMP)
	$(PY) scripts/soak.py --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# the interop tier (not part of `make test`): clients of the Go library (twitchscience/kinsumer) beside
# kinsumer on one application, on kinesalite and moto's server (docs/development.md). KINSUMER_GO_SRC must
# point at a checkout of the Go library (make interop KINSUMER_GO_SRC=~/src/kinsumer; without it the tier
# tries a shallow clone from GitHub), and Go needs the Debian packages of its dependencies (apt-get install
# golang-go golang-github-aws-aws-sdk-go-dev golang-github-google-uuid-dev golang-golang-x-sync-dev);
# whatever is missing, every test skips saying so. INTEROP_ARGS passes pytest options.
interop: $(STAMP) $(KINESALITE)
	$(PY) -m pytest tests/interop $(INTEROP_ARGS)

clean:
	rm -rf $(VENV) $(PEERS) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
