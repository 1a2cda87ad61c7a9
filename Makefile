# The two set-up commands of the README:
#   make demo   - create .venv from the lock file, then train + evaluate the embedded demo
#   make test   - create .venv from the lock file, then run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2

.PHONY: install vllm demo test test-slow lint catalog configs docs docs-serve
install: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

# vLLM lives in its own environment (its pins clash with ours); the serving tests use it when present
vllm: .venv-vllm/.installed

.venv-vllm/.installed: requirements-vllm.lock
	test -x .venv-vllm/bin/python || python3 -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-vllm.lock
	touch $@

demo: install
	$(VENV)/bin/toolbox demo

test: install
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-slow: install
	$(VENV)/bin/pytest -m slow $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

catalog: install
	$(VENV)/bin/toolbox catalog --out docs/catalog.md

# the config group files that only name a component, generated from the registries
configs: install
	$(VENV)/bin/python -m toolbox.experiment.group_files

# the documentation site: docs/gen_pages.py (an MkDocs hook) generates the reference pages from the code
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve
