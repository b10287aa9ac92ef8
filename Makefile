# Two commands on a fresh CPU-only machine with Python 3.11 and make:
#   make report   creates/updates .venv, executes the notebooks (replay on CPU), writes reports/
#   make test     creates/updates .venv, runs the CPU test suite (GPU tests skip themselves)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: report test quick-report venv clean

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

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf reports/ $(VENV)
