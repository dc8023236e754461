# The two commands of the README. Each bootstraps .venv from nothing on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: standalone test lint browser proto clean

# The console's browser test (tests/browser) drives Debian's `chromium` headless. Installed once;
# quiet when it is there already. Root installs it directly, anyone else through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.run-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(VENV)/.run-installed

standalone: $(VENV)/.run-installed
	$(BIN)/velamq standalone --data-dir ./data --broker-port 6650 --http-port 8080

lint: $(VENV)/.test-installed
	$(BIN)/ruff check velamq tests benchmarks examples pyspark_velamq.py
	$(BIN)/mypy --strict velamq

browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing chromium for the console's browser test"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# The suite mostly waits (broker processes, Spark, the official client's timers), so it runs on
# more workers than a CI machine's two cores; see docs/testing.md.
TEST_WORKERS ?= 4

test: lint browser
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# Regenerate the protobuf module from velamq/protocol/_pulsar_api.proto.
proto: | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	# Run from the root: inside velamq/protocol, its _compression.py would shadow the stdlib's.
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m grpc_tools.protoc -Ivelamq/protocol \
		--python_out=velamq/protocol --mypy_out=velamq/protocol velamq/protocol/_pulsar_api.proto

clean:
	rm -rf $(VENV) data .mypy_cache .pytest_cache .ruff_cache
