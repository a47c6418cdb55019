# The two commands that are the contract with users and CI:
#   make test   install what is needed, then lint, type-check and run the whole suite
#   make demo   run the main job on the embedded default (SQLite; no network, no API key):
#               start the example agent, kill it, resume it from the CLI, approve, move it

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test demo lint typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -n 2

test: lint typecheck pytest

demo: $(STAMP)
	$(BIN)/statekeeper demo

bench: $(STAMP)
	$(BIN)/python benchmarks/chat_workload.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .statekeeper
