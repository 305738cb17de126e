# The two commands of the README: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
.DEFAULT_GOAL := test

.PHONY: demo demo-cli test lint typecheck pytest bench clean

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

bench: $(STAMP)
	$(BIN)/python bench/codec.py
	$(BIN)/python bench/listing.py
	$(BIN)/python bench/exchange.py
	$(BIN)/python bench/admission.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache .hypothesis

# Two real pi-python sessions (scripted models) messaging each other, each in its own process.
demo: $(STAMP)
	$(BIN)/python demo/agents_demo.py

# The command line and two headless inboxes.
demo-cli: $(STAMP)
	$(BIN)/python demo/cli_demo.py
