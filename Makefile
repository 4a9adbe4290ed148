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

# make report [REPORT_ARGS="--model DIR --draft DIR"]: a progress bar per notebook cell, then the paths.
report: env-report
	$(PY) -m bench.report --out reports $(REPORT_ARGS)

test: env
	$(PY) -m pytest $(PYTEST_ARGS)

test-gpu: env
	$(PY) -m pytest -m gpu -p no:xdist

# make lab [PORT=8888] [NO_BROWSER=1] [IP=127.0.0.1]: on a remote GPU box, NO_BROWSER=1 there and an SSH
# port forward here (ssh -L 8888:localhost:8888 box), then open the printed http://localhost:8888/... link.
# As root (a container) it passes --allow-root.
PORT ?= 8888
IP ?= 127.0.0.1
NO_BROWSER ?=
lab: env-notebooks
	$(VENV)/bin/jupyter lab notebooks/ --ServerApp.ip=$(IP) --ServerApp.port=$(PORT) \
		$(if $(NO_BROWSER),--no-browser) $(if $(filter 0,$(shell id -u)),--allow-root)

clean:
	rm -rf reports .pytest_cache
