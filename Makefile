# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
LIVE_BUILDS ?= 9859 10001 9934 11434

.PHONY: demo test agents setup system-deps live-builds bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

# byte-compile the package: an editable install is not, and with PYTHONDONTWRITEBYTECODE
# set every start would compile replayer's sources again (~0.1 s)
setup: $(STAMP)
	@$(PY) -m compileall -q replayer

# ccache makes a rebuild of a llama-server build take seconds; install it when we can.
system-deps:
	@command -v ccache >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing ccache (apt)"; \
	    (apt-get update -qq && apt-get install -y -qq ccache) >/dev/null 2>&1 || echo "ccache not installed; builds will be slower"; \
	  else echo "ccache not found; builds will be slower"; fi; }
	@command -v cmake >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq cmake) >/dev/null 2>&1; fi; }

# Real llama-server builds for the live tests: cached under the user cache dir,
# ~6-10 min each cold on 2 cores, seconds when cached.
live-builds: setup system-deps
	@for b in $(LIVE_BUILDS); do $(VENV)/bin/replayer builds install $$b --backend cpu || exit 1; done

# The real agent CLIs (pinned, npm, cached in ~/.cache/replayer/npm) against a scripted model.
agents: setup
	$(PY) -m pytest -m agents tests/agents

test: setup system-deps live-builds agents
	$(PY) -m pytest -m "not agents"

demo: setup
	$(VENV)/bin/replayer demo

bench: setup
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
