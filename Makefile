# Two commands do all set-up on a fresh machine that has only Python 3.11:
#   make demo   -- the main job on an embedded default model
#   make test   -- the test suite
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test lint venv clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[zoo,dev]'
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

demo: $(STAMP)
	$(VENV)/bin/tvm-fusion demo

lint: $(STAMP)
	$(VENV)/bin/ruff check tvm_fusion_ext tests scripts

clean:
	rm -rf $(VENV) build *.egg-info
