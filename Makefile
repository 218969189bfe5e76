# Two entry points for a fresh machine: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint kb bench clean system-deps

$(STAMP): pyproject.toml
	@echo "== make: creating $(VENV) and installing triage into it, with torch 2.13 (the CPU build the"
	@echo "   probes and failure reproductions use) and the test tools. The torch download is the"
	@echo "   long part (a few minutes); pip shows its progress below."
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install --progress-bar on 'torch==2.13.0' -e '.[dev]'
	touch $(STAMP)
	@echo "== make: installed. \`triage\` is $(VENV)/bin/triage; to type it anywhere in this shell:"
	@echo "   source $(VENV)/bin/activate    (or: export PATH=\"$$PWD/$(VENV)/bin:\$$PATH\")"

run: $(STAMP)
	@echo "triage: $(VENV)/bin/triage (source $(VENV)/bin/activate to type \`triage\` in this shell)"
	$(VENV)/bin/triage

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check triage probes bench tests
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache

kb: $(STAMP)
	$(PY) -m triage kb check

# The docs-site tests drive Debian's Chromium headless. When it is missing, say so and why, then
# install it with apt-get (as root, or through sudo when sudo needs no password); otherwise stop
# with the command to run.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "== make test: the docs-site tests open the built site in a real browser, and Debian's"; \
	  echo "   chromium is not installed. Installing it now: apt-get install chromium (about 100 MB)."; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	  else echo "make test: cannot install it without root. Run: sudo apt-get install -y chromium" >&2; \
	       echo "           then make test again." >&2; exit 1; fi; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	    && echo "== make test: chromium installed."; }

test: system-deps lint kb
	$(PY) -m pytest -q -n 2 --dist loadfile

# The quick tier while developing: no torch processes, no browser, no Textual app (marker `slow`),
# spread over the machine's cores.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n auto

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
