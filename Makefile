# Thin wrapper over CMake so that the README's two commands are
#   make demo    and    make test
# Both install missing Debian packages first (quietly, only if missing).

BUILD     ?= build
PREFIX    ?= /usr/local
BUILD_TYPE ?= RelWithDebInfo   # -O2 plus DWARF: abidw/abidiff need the debug info
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
# Multi-rank tests oversubscribe cores; running many at once on a small
# machine turns timeouts into false failures, so ctest gets half the cores.
CTEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n > 2 ? n / 2 : 1 )))
CTEST_TIMEOUT ?= 600
CMAKE_FLAGS ?=
# Warnings as errors: OFF for users (another compiler or build type may warn
# where ours does not), ON in CI (.ci/run: make test WERROR=ON).  Passed on
# every configure so that the cached value follows the command line.
WERROR ?= OFF
# cmake --build runs make underneath: keep its output to what matters.
MAKEFLAGS += --no-print-directory

.PHONY: all deps configure build test demo install clean gpu-check

all: build

deps:
	@tools/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) --log-level=WARNING -DCMAKE_BUILD_TYPE=$(strip $(BUILD_TYPE)) -DZERO_WERROR=$(strip $(WERROR)) $(CMAKE_FLAGS)

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --timeout $(CTEST_TIMEOUT) -j$(CTEST_JOBS)

# The demo (examples/demo/run-demo.sh): stage0/1/2 on 4 MPI ranks, compared.
demo: build
	@$(BUILD)/tools/zero-info
	ZERO_BUILD_DIR=$(abspath $(BUILD)) DEMO_NO_BUILD=1 examples/demo/run-demo.sh

# The GPU path on a machine with a GPU: CUDA+NCCL build, ctest -L gpu, the
# demo on the device, GPU benches; one summary (tools/gpu-check.sh).  Without
# a GPU it reports every part skipped and exits 0.
gpu-check: deps
	tools/gpu-check.sh $(GPU_CHECK_OUT)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)
