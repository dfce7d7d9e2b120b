# Two commands on a fresh Linux machine:  `make demo`  and  `make test`
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
BIN := $(VENV)/bin
TORCH_ARGS := $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))

.PHONY: demo test install install-dev clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q $(TORCH_ARGS)
	$(BIN)/pip install -q -e '.[demo]'

install-dev: $(BIN)/python
	$(BIN)/pip install -q $(TORCH_ARGS)
	$(BIN)/pip install -q -e '.[dev]'

demo: install
	$(BIN)/ddp_nb demo

test: install-dev
	PATH="$(CURDIR)/$(BIN):$$PATH" bash tools/test.sh

clean-venv:
	rm -rf $(VENV)
