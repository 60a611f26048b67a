# The README's two commands: `make demo` and `make test`. Everything else is a helper.
SHELL := /bin/bash
VENV := .venv
CROWDPREF := $(VENV)/bin/crowdpref
# tests use their own state folders (test-output/state-<pid>, free ports), never the user's stack

.PHONY: setup up down status demo test test-unit docs docs-serve docs-check bench clean

setup:
	./services/bootstrap.sh

up: setup
	$(CROWDPREF) up

down:
	@[ -x $(CROWDPREF) ] && $(CROWDPREF) down || true

status:
	$(CROWDPREF) status

# The whole study on the embedded stack with simulated participants: questions, study 1 with
# drop-outs and re-allocation, study 2, screening, aggregation, a published dataset folder.
# Prints the Prefect run link, an Argilla login to try, the dataset folder and per-stage times.
demo: setup
	$(CROWDPREF) up
	$(CROWDPREF) deploy
	$(CROWDPREF) demo studies/demo.yaml

# Runs the whole suite, after building the docs strictly (a broken link or a reference to a
# missing object fails it). Services the tests need are started by session fixtures and stopped
# at the end; the trap also stops anything left by an interrupted run.
# TEST_WORKERS processes share the files (pytest-xdist, a file's tests stay on one worker); each
# starts the services its tests need in its own state folder. TEST_WORKERS=0 runs in one process.
# 3 on the 2-core machine: with 2, the CPUs idled 14% of the run (a test waiting on a service
# leaves its worker idle); with 3, 2.5% (docs/performance.md).
# Python writes bytecode during the run even where PYTHONDONTWRITEBYTECODE is set (this machine
# sets it): the suite starts ~150 Python processes, and each would compile crowdpref's,
# the services' and the tests' sources again (a test worker's collection: 24 -> 13 s of CPU);
# compiled once before the workers start, so the three do not all compile them at once.
TEST_WORKERS ?= 3
test: setup docs-check
	@mkdir -p test-output
	@trap 'for home in test-output/state-*; do [ -d "$$home" ] && CROWDPREF_HOME=$$home $(CROWDPREF) down >/dev/null 2>&1; done; true' EXIT; \
	  env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/python -m compileall -q -j 0 crowdpref services flows tasks deployments tests benchmarks && \
	  env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS)

test-unit: setup
	$(VENV)/bin/python -m pytest -q tests/unit $(PYTEST_ARGS)

# The docs site (mkdocs.yml, docs/): reference pages are generated from the code at build time.
# --strict: any warning (a broken link or anchor, a reference to a missing object) fails it.
# The two variables silence the banners that mkdocs-material and properdocs print on every build.
MKDOCS := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs
docs: setup
	$(MKDOCS) build --strict --site-dir site

docs-serve: setup
	$(MKDOCS) serve

docs-check: setup
	@mkdir -p test-output
	$(MKDOCS) build --strict --site-dir test-output/site

bench: setup
	$(VENV)/bin/python benchmarks/argilla_search.py

clean: down
	rm -rf test-output build site *.egg-info
