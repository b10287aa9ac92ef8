# Two commands on a fresh CPU-only machine with Python 3.11 and make:
#   make report   creates/updates .venv, executes the notebooks (replay on CPU), writes reports/
#   make test     creates/updates .venv, runs the CPU test suite (GPU tests skip themselves)
#   make notebooks  regenerates notebooks/*.ipynb from their jupytext sources notebooks/*.py
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: report test quick-report notebooks venv clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --prefix $(VENV) --name python3 --display-name "Python 3 (gluon-lab)" >/dev/null
	touch $(STAMP)

report: $(STAMP)
	$(PY) -m gluon_lab report --mode auto

quick-report: $(STAMP)
	$(PY) -m gluon_lab report --mode auto --quick

# notebooks/NN-*.py (jupytext percent format) are the sources; this regenerates every .ipynb from its
# .py (no outputs, deterministic cell ids: running it twice gives no diff)
notebooks: $(STAMP)
	$(PY) ci/sync_notebooks.py

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf reports/ $(VENV)
