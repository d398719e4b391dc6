# The README's two set-up commands, as readable steps (GNU Make):
#
#   make demo     the locked environment in .venv, then the demo job into demo/
#   make test     the locked environment in .venv, then every tier of the tests (.ci/test)
#   make install  the locked environment alone
#
# Each step prints what it does and, when it fails, which step failed and what to try.
# The environment is requirements.lock, every file checked against its sha256: pip installs
# the installer, uv, from its own hash-checked lines (requirements-uv.lock), uv the rest, then
# the checkout itself, editable, built by the lock's setuptools (nothing unhashed is fetched).
# A step runs again only when what it installs from changed (the stamp files in .venv/).
# Offline, from a wheelhouse (docs/how-to/install-offline.md):
#
#   make install WHEELHOUSE=wheelhouse
#
# Variables: PYTHON (python3: a Python 3.11, 3.11.5 or later), VENV (.venv), WHEELHOUSE
# (empty: PyPI, or UV_DEFAULT_INDEX behind a mirror), BYTECODE (--compile-bytecode: every module
# of the lock compiled at install, so that no process compiles what it imports, even where it
# may not write the cache or PYTHONDONTWRITEBYTECODE is set; empty: compiled on first import).

PYTHON ?= python3
VENV ?= .venv
WHEELHOUSE ?=
BYTECODE ?= --compile-bytecode
BYTECODE_NOTE := $(if $(strip $(BYTECODE)),bytecode compiled,bytecode left to Python)

ifeq ($(strip $(WHEELHOUSE)),)
PIP_SOURCE :=
UV_SOURCE :=
PROJECT_SOURCE :=
HINT := The message above says why. No connection? Behind a mirror set UV_DEFAULT_INDEX; without a network: make install WHEELHOUSE=DIR (docs/how-to/install-offline.md)
else
PIP_SOURCE := --no-index --find-links $(WHEELHOUSE)
UV_SOURCE := --offline --no-index --find-links $(WHEELHOUSE)
PROJECT_SOURCE := --offline --no-index
HINT := The message above says why. Is every file of requirements.lock in $(WHEELHOUSE), for this platform and Python 3.11? (docs/how-to/install-offline.md)
endif

# A Python 3.11 of 3.11.5 or later: the lock's pymdown-extensions needs it (Debian 12's python3
# is 3.11.2, and uv would stop at step 3 with a resolver's message).
IS_PYTHON_311 := -c 'import sys; sys.exit(not (3, 11, 5) <= sys.version_info[:3] < (3, 12))'
UV := $(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --no-deps

# step NUMBER,WHAT,COMMAND,HINT: print WHAT and COMMAND, run it; when it fails, say which step
# failed and what to try (make then names its target and stops: nothing after it runs).
step = @echo "== install $(1): $(2)" && echo "   $(strip $(3))" && ( $(3) ) \
  || { echo "make: install step $(1) FAILED ($(2)); nothing after it ran. $(4)" >&2; exit 1; }

.PHONY: demo test install
.DELETE_ON_ERROR:

demo: install
	@echo "== demo: das demo --output demo (inputs, validation, budgets, two releases into demo/)"
	$(VENV)/bin/das demo --output demo

test: install
	@echo "== test: every tier of the tests (docs/development/index.md)"
	bash .ci/test

install: $(VENV)/.das-project

$(VENV)/bin/python:
	$(call step,1/4,a virtualenv in $(VENV),$(PYTHON) -m venv $(VENV) && $(VENV)/bin/python $(IS_PYTHON_311),It needs Python 3.11.5 or a later 3.11 with its venv module (Debian 12's python3 is 3.11.2): make PYTHON=/path/to/python3.11 ... (then delete $(VENV) first))

$(VENV)/.das-uv: requirements-uv.lock | $(VENV)/bin/python
	$(call step,2/4,the installer uv by pip from requirements-uv.lock (hash-checked),$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --require-hashes $(PIP_SOURCE) -r requirements-uv.lock,$(HINT))
	@touch $@

$(VENV)/.das-lock: requirements.lock $(VENV)/.das-uv
	$(call step,3/4,requirements.lock by uv (every file hash-checked; $(BYTECODE_NOTE)),$(UV) --require-hashes $(BYTECODE) $(UV_SOURCE) -r requirements.lock,$(HINT))
	@touch $@

$(VENV)/.das-project: pyproject.toml setup.py $(VENV)/.das-lock
	$(call step,4/4,this checkout (editable; built by the lock's setuptools),$(UV) --no-build-isolation $(PROJECT_SOURCE) -e .,Run the command above with -v in place of -q to see why)
	@touch $@
	@echo "== installed. source $(VENV)/bin/activate puts das on your PATH"
