# Every target sets up its own virtual environment from the pinned constraints.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup bytecode run test check lint bench serve nightly benchmarks sample clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The package byte-compiled, as pip does for what it installs: where PYTHONDONTWRITEBYTECODE is
# set (CI machines, containers), every command would otherwise compile it again (0.2 s a start).
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q pipeline

run: bytecode
	$(BIN)/decisions score sample_data/portfolio.xlsx --reasoning borderline \
		-o out/portfolio-scored.xlsx -o out/portfolio-scored.csv -o out/portfolio-scored.parquet

test: bytecode
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check pipeline tests scripts bench
	$(BIN)/ruff format --check pipeline tests scripts bench

check: lint test

bench: bytecode
	$(BIN)/python -m bench

serve: bytecode
	$(BIN)/decisions serve --demo

benchmarks: $(STAMP)
	$(BIN)/decisions benchmarks build --out sample_data/benchmarks.csv

sample: $(STAMP)
	$(BIN)/python scripts/make_sample_portfolio.py

# The ledger (.cache/decisions.db: balances, API keys) and the run journals (.cache/journals:
# what was paid) are data, not build output: kept.
clean:
	rm -rf $(VENV) out

nightly: bytecode
	$(BIN)/decisions nightly
