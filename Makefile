# Two entry points for a new machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := bash hack/pytest.sh

.PHONY: demo test test-unit test-cluster lint testenv browser image-tools clean-testenv image

# The install compiles kohort's bytecode, as the image has it: with PYTHONDONTWRITEBYTECODE set,
# every process the tests and benches start would compile kohort's modules from source.
# Editable in compat mode: the checkout's root goes on the venv's path, so `hack` (not part of
# the package: `kohort dev`), `tests` and `bench` import from any directory, as kohort does.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]' --config-settings editable_mode=compat
	$(BIN)/python -c "from hack.chaos.stack import compile_kohort; compile_kohort()"
	touch $(STAMP)

# Installs everything, builds the local control plane, and runs the demo
# (GANG_BACKEND=kubernetes: kube-scheduler's own gang scheduling places the gangs, no Volcano).
GANG_BACKEND ?= volcano
demo: $(STAMP) testenv
	$(BIN)/kohort dev demo --gang-backend $(GANG_BACKEND)

# The whole test suite: lint, types, layers, unit tests, then tests on the real control plane.
test: $(STAMP) testenv browser image-tools lint
	$(PYTEST) $(PYTEST_ARGS)

# Unit tests need no server; the chart tests among them need the helm binary.
test-unit: $(STAMP)
	bash hack/build-testenv.sh helm >/dev/null
	$(PYTEST) -m "not cluster" $(PYTEST_ARGS)

test-cluster: $(STAMP) testenv browser image-tools
	$(PYTEST) -m cluster $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

testenv:
	bash hack/build-testenv.sh

# kohort's image as an OCI image layout in .kohort/image/oci, built without Docker or a registry
# from Debian's packages and kohort's wheel (hack/build-image.sh; docs/installation.md).
image: $(STAMP)
	PYTHON=$(BIN)/python bash hack/build-image.sh

# Debian's mmdebstrap, umoci, podman, runc and skopeo, for `make image` and the image's tests
# (tests/cluster/test_image.py builds the image when it is missing or out of date).
# Then the image itself, when the tools are there (its tests skip, saying why, when it is not).
image-tools: $(STAMP)
	bash hack/install-image-tools.sh
	IF_STALE=1 PYTHON=$(BIN)/python bash hack/build-image.sh \
	  || echo "make image failed: the image's tests will skip, saying so" >&2

# Debian's Chromium and chromedriver, for the dashboard's tests in a real browser.
browser:
	bash hack/install-browser.sh

# Removes every built control-plane binary (the next `make testenv` is a cold build).
clean-testenv:
	rm -rf "$${KOHORT_TESTENV_CACHE:-$$HOME/.cache/kohort/testenv}"
