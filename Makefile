# Quick start: `make demo` and `make test`. Both install what is missing (Debian packages,
# a virtual environment with vkcore editable and its test extras), then run.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vkcore-installed
APT_PACKAGES := mesa-vulkan-drivers libvulkan1 vulkan-tools glslang-tools spirv-tools vulkan-validationlayers
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The README's commands, examples and benchmarks keep their caches in ./cache.
export VKCORE_CACHE_DIR ?= $(CURDIR)/cache

.PHONY: all setup system venv demo test lint soak bench peers coldwarm gpu-check wheel clean mesa25

all: test

setup: system venv

system:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

venv: $(STAMP)

$(STAMP): pyproject.toml
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

# Mesa 25's lavapipe from bookworm-backports, unpacked into $(VENV)/mesa25 for the
# pipeline-cache driver-upgrade test (which also fetches it on first use).
mesa25:
	bash tests/support/fetch_mesa_backports.sh $(abspath $(VENV))/mesa25

demo: setup
	$(PY) -m vkcore demo

# The whole suite: lint and type checks, then pytest under the validation layer (the
# wheel build, the examples, the short soak and the cold/warm command are tests too), one
# pytest-xdist worker per core up to 4 (TEST_WORKERS=0: one process).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
test: setup lint
	VKCORE_VALIDATION=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The long soak: thousands of kernel calls and device lifetimes under validation; prints
# calls, duration, RSS and live Vulkan object counts (make test runs a short version).
soak: setup
	VKCORE_VALIDATION=1 VKCORE_SOAK=long $(PY) -m pytest -q -s -m soak tests/device/test_soak.py

lint: setup
	$(PY) -m ruff check vkcore tests examples setup.py
	$(PY) -m ruff format --check vkcore tests examples setup.py
	$(PY) -m mypy vkcore

# Kernels against their baselines (a few minutes); the table on stdout, the plot in cache/.
bench: setup
	$(PY) -m vkcore bench $$($(PY) -c 'import matplotlib' 2>/dev/null && echo --plot cache/bench.png)

# vkcore against Kompute (kp), wgpu-py and vkdispatch on one tiny kernel, each in its own
# process: the peers go into $(PEERS_VENV) on first use (a few minutes: kp is built from its
# sdist; tests/support/install_peers.sh), then the table on stdout and cache/peers.json.
PEERS_VENV ?= .venv-peers
peers: setup
	bash tests/support/install_peers.sh $(abspath $(PEERS_VENV))
	$(PY) -m vkcore bench --peers --peers-venv $(PEERS_VENV)

# Cold vs warm pipeline creation, one fresh process per sample (under 2 minutes on lavapipe);
# draws cache/coldwarm.png when matplotlib is installed.
coldwarm: setup
	$(PY) -m vkcore coldwarm $$($(PY) -c 'import matplotlib' 2>/dev/null && echo --plot cache/coldwarm.png)

# On a machine with an NVIDIA GPU: the suite on the GPU (driver asserted), bench, coldwarm and
# tune, all results with the driver version in gpu-check-<date>/ (about 8 minutes).
gpu-check: setup
	bash examples/gpu_check.sh

# sdist and wheel in dist/; the wheel carries the GLSL sources and every shader variant's
# SPIR-V (tests/test_packaging.py installs it into a clean venv and runs it without glslang).
wheel: setup
	$(PY) -m build --outdir dist

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
