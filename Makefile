# Two entry points for a fresh machine: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint kb bench clean system-deps

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is the CPU build the probes and failure reproductions use.
	$(PY) -m pip install -q 'torch==2.13.0' -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/triage

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check triage probes bench tests
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

kb: $(STAMP)
	$(PY) -m triage kb check

# The docs-site tests drive Debian's Chromium headless; install it when it is missing (root only).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "install Debian's chromium (apt-get install chromium) for the docs tests" >&2; exit 1; fi; }

test: system-deps lint kb
	$(PY) -m pytest -q

# The quick tier while developing: no torch processes, no browser, no Textual app (marker `slow`).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
