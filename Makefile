# `make test` and `make demo` work from a fresh clone: they create .venv when missing and
# install once (the stamp file makes a second call install nothing).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fedbench-installed

.PHONY: install test test-slow demo docs lint clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)
	@echo "installed fedbench (editable, with its pinned dependencies) into $(VENV); next: make demo, make test," \
		"or $(VENV)/bin/fedbench --help"

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

demo: $(STAMP)
	$(VENV)/bin/fedbench demo

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or anchor.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# ruff: the linter and the formatter (settings in pyproject.toml); the tree must be clean.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache
