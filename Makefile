# attnkit: `make demo` sets everything up and runs the main job; `make test` sets up and runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ATTNKIT := $(VENV)/bin/attnkit
DEB_PACKAGES := sword-text-sparv sword-text-web dataset-fashion-mnist
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup venv data-packages data demo test bench clean

setup: venv data-packages

# The virtualenv, rebuilt when pyproject.toml changes. torch first, pinned, so pip takes the CPU build from disk.
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

# The Debian packages that carry the real data (the Bibles and Fashion-MNIST); installed only when missing.
data-packages:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian data packages:$$missing"; \
	  $(SUDO) apt-get install -y -q $$missing || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $$missing; }; \
	fi

data: setup
	$(ATTNKIT) data prepare bible

demo: setup
	$(ATTNKIT) demo

test: setup
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 -p no:cacheprovider

bench: setup
	$(PY) benchmarks/attention.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
