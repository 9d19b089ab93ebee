# Two commands set everything up on a fresh Debian 12 (as root): `make demo`, `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
APT_PACKAGES := fio numactl

.PHONY: demo test lint deps venv bench lab clean

deps: ## fio, numactl and the venv's prerequisites from apt, when missing
	@missing=""; \
	for p in $(APT_PACKAGES); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "run as root (or install:$$missing) first" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: deps $(STAMP)

demo: venv ## a real 24-point sweep on a temp file; prints where results and figures are
	$(BIN)/iobench run configs/demo.yaml

lint: venv
	$(BIN)/ruff check iobench lab tests benchmarks
	$(BIN)/ruff format --check iobench lab tests benchmarks
	$(BIN)/mypy

test: venv lint ## lint, types, then the tests (root, loop-device and lab tests run when root)
	$(BIN)/pytest

lab: venv ## boot the QEMU 2-socket SMT guest, sweep NUMA/SMT/settings/guard in it: results/lab-*/
	$(BIN)/python -m lab results

bench: venv ## iobench's overhead over plain fio (benchmarks/overhead.py)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
