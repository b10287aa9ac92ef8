# Two commands on a fresh CPU-only machine with Python 3.11 and make:
#   make report   creates/updates .venv, executes the notebooks (replay on CPU), writes reports/
#   make test     creates/updates .venv, runs the CPU test suite on every core (GPU tests skip themselves)
#   make notebooks  regenerates notebooks/*.ipynb from their jupytext sources notebooks/*.py
#   make browser  installs Debian's chromium + chromium-driver (apt-get, as root or via sudo -n) when
#                 /usr/bin/chromium or /usr/bin/chromedriver is missing: tests/test_browser.py needs them
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: report test quick-report notebooks venv browser clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --prefix $(VENV) --name python3 --display-name "Python 3 (gluon-lab)" >/dev/null
	touch $(STAMP)

CHROMIUM     ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
BROWSER_PKGS := chromium chromium-driver fonts-dejavu-core
APT_INSTALL  := apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(BROWSER_PKGS)

# Never fails the make: without a browser tests/test_browser.py fails and says why.
browser:
	@if [ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ]; then exit 0; fi; \
	echo "make browser: $(CHROMIUM) or $(CHROMEDRIVER) missing; installing $(BROWSER_PKGS) with apt-get"; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make browser: no apt-get on this machine: install chromium and chromedriver at $(CHROMIUM) and $(CHROMEDRIVER) by hand; the browser tests will fail until then" >&2; \
	elif [ "$$(id -u)" = 0 ]; then \
	  sh -c '$(APT_INSTALL)' || echo "make browser: apt-get install of $(BROWSER_PKGS) failed (see above); the browser tests will fail" >&2; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  sudo -n sh -c '$(APT_INSTALL)' || echo "make browser: sudo apt-get install of $(BROWSER_PKGS) failed (see above); the browser tests will fail" >&2; \
	else \
	  echo "make browser: not root and no password-less sudo: run  sudo sh -c '$(APT_INSTALL)'  (the browser tests fail until then)" >&2; \
	fi

# the site, then the real-browser check of every page (console errors, links, images, contents),
# which saves a screenshot of each page to reports/screenshots/ (skipped, with a note, without a browser)
report: $(STAMP) browser
	$(PY) -m gluon_lab report --mode auto
	@$(PY) -m gluon_lab.browser reports --screenshots reports/screenshots; rc=$$?; \
	if [ $$rc = 2 ]; then echo "make report: no headless browser here, pages not checked (make browser)"; \
	elif [ $$rc != 0 ]; then exit $$rc; fi

quick-report: $(STAMP)
	$(PY) -m gluon_lab report --mode auto --quick

# notebooks/NN-*.py (jupytext percent format) are the sources; this regenerates every .ipynb from its
# .py (no outputs, deterministic cell ids: running it twice gives no diff)
notebooks: $(STAMP)
	$(PY) ci/sync_notebooks.py

# on every core (pytest-xdist); --dist loadgroup keeps the tests of one xdist_group on one worker: the
# session's replay build of every notebook (tests/conftest.py) is built once, by that worker, while the
# others run the rest. PYTEST_WORKERS=0 runs in this process (no workers).
PYTEST_WORKERS ?= auto
test: $(STAMP) browser
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

clean:
	rm -rf reports/ $(VENV)
