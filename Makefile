# Two commands on a fresh Linux machine:  `make demo`  and  `make test`
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
BIN := $(VENV)/bin
TORCH_ARGS := $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))

.PHONY: demo test test-slow install install-dev install-docs docs clean-venv test-gpu gpu-wheels

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q $(TORCH_ARGS)
	$(BIN)/pip install -q -e '.[demo]'

install-dev: $(BIN)/python
	$(BIN)/pip install -q $(TORCH_ARGS)
	$(BIN)/pip install -q -e '.[dev]'

install-docs: $(BIN)/python
	$(BIN)/pip install -q $(TORCH_ARGS)
	$(BIN)/pip install -q -e '.[docs]'

demo: install
	$(BIN)/ddp_nb demo

test: install-dev
	PATH="$(CURDIR)/$(BIN):$$PATH" bash tools/test.sh

test-slow: install-dev  # the tests marked slow: the benchmarks end to end, long soaks (not in CI: `make test` leaves them out)
	PATH="$(CURDIR)/$(BIN):$$PATH" bash tools/test.sh --slow

docs: install-docs  # the site from nbs/ into build/docs/html (Sphinx + myst-nb; fails on a broken internal link)
	$(BIN)/python tools/make_docs.py

test-gpu:   # on a GPU machine, with its own python3 (a CUDA build of torch); no venv, no registry needed
	bash tools/test_gpu.sh

gpu-wheels: # where pip reaches PyPI: the wheels test-gpu installs offline from .whl/
	bash tools/gpu_wheels.sh

clean-venv:
	rm -rf $(VENV)
