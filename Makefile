# The two commands: `make report` (the main job) and `make test` (the test suite).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2

.PHONY: env env-report env-notebooks report test test-gpu lab clean

env:
	VENV=$(VENV) bash tools/setup_env.sh dev

env-report:
	VENV=$(VENV) bash tools/setup_env.sh report

env-notebooks:
	VENV=$(VENV) bash tools/setup_env.sh notebooks

report: env-report
	$(PY) -m bench.report --out reports

test: env
	$(PY) -m pytest $(PYTEST_ARGS)

test-gpu: env
	$(PY) -m pytest -m gpu -p no:xdist

lab: env-notebooks
	$(VENV)/bin/jupyter lab notebooks/

clean:
	rm -rf reports .pytest_cache
