# Two commands do all the set-up on a fresh machine:
#   make demo   venv + torch 2.13.0 (if not importable) + neuronscope[cli], then the main example
#   make test   venv + torch 2.13.0 (if not importable) + neuronscope[test], then the tests
# Variables: VENV (default .venv), PYTHON (the interpreter that makes the venv, default python3),
# TORCH_INDEX_URL (a wheel index for torch, e.g. https://download.pytorch.org/whl/cpu on a
# CPU-only machine where pip would otherwise pick a multi-GB CUDA build), PYTEST_ARGS.

VENV ?= .venv
PYTHON ?= python3
TORCH_VERSION := 2.13.0
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -q

.PHONY: demo test lint install install-test clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch only when it is not importable already: the project's range (<2.15) accepts what is there.
$(VENV)/.torch: | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || \
		$(PY) -m pip install "torch==$(TORCH_VERSION)" $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	@touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -q -e ".[cli]"
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -q -e ".[test]"
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: install
	$(PY) examples/rmsnorm.py

# the gate: lint, format and types (config in pyproject.toml), then the tests
lint: install-test
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src
	$(VENV)/bin/mypy

# Two passes: the tests that are not timing claims on TEST_WORKERS processes (pytest-xdist, a
# file per worker at a time), then the timing claims (@pytest.mark.timing) alone, so that no
# other test competes with them. Fails if either fails; "no tests" (exit 5) only if both had none.
TEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not timing" $(PYTEST_ARGS); a=$$?; \
	$(PY) -m pytest -m timing $(PYTEST_ARGS); b=$$?; \
	if [ $$a -eq 5 ] && [ $$b -eq 5 ]; then exit 5; fi; \
	for rc in $$a $$b; do if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then exit $$rc; fi; done

clean:
	rm -rf $(VENV)
