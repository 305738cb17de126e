# The two commands of the README: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
.DEFAULT_GOAL := test

.PHONY: demo demo-cli test lint typecheck pytest bench clean fuzz soak

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,pi-python]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check src tests bench demo
	$(BIN)/ruff format --check src tests bench demo
	$(BIN)/mypy --strict src
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench demo
	$(BIN)/ruff format --check src tests bench demo

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP)
	$(BIN)/pytest

# The hostile suite's fuzzer at length: 200,000 examples against a live session (CI runs 10,000).
FUZZ_EXAMPLES ?= 200000
fuzz: $(STAMP)
	PI_XS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/hostile -k fuzz --timeout=0 -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/listing.py
	$(BIN)/python bench/exchange.py
	$(BIN)/python bench/admission.py

# A live inbox under a connection flood and a slowloris, against its own figures at rest (about
# 50 s: the slow connections last the contract's 30 s deadline). Exits 1 if an invariant fails.
soak: $(STAMP)
	$(BIN)/python bench/soak.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache .hypothesis

# Two real pi-python sessions (scripted models) messaging each other, each in its own process.
demo: $(STAMP)
	$(BIN)/python demo/agents_demo.py

# The command line and two headless inboxes.
demo-cli: $(STAMP)
	$(BIN)/python demo/cli_demo.py
