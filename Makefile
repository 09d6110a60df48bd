# `make test` and `make demo` work from a fresh clone: they create .venv when missing and
# install once (the stamp file makes a second call install nothing).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fedbench-installed

.PHONY: install test test-slow demo docs clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

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

clean:
	rm -rf $(VENV) .pytest_cache
