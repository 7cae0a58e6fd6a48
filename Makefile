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

.PHONY: all deps configure build test test-scale demo install clean gpu-check fuzz check-sanitize

all: build

deps:
	@tools/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) --log-level=WARNING -DCMAKE_BUILD_TYPE=$(strip $(BUILD_TYPE)) -DZERO_WERROR=$(strip $(WERROR)) $(CMAKE_FLAGS)

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# Two passes.  First every test whose checks are bits, memory counters or
# tolerances on results -- no wall-clock assertion, no kill, stop or
# timeout being tested, timeouts far above their run time --
# CTEST_PAR_JOBS at a time (every core: on 2 cores a 2-rank run leaves much
# of the second one idle in MPI startup and the demo's serial parts); then
# the tests labelled CTEST_SERIAL_LABELS, CTEST_JOBS at a time: the fault
# catalogue (faults: SIGSTOP and kill -9 past a timeout, detection times),
# the agreement and multi-host tests (timeouts, a link taken down) and
# `serial` (a test that times itself: timing_*, a progress timeout under
# stress).  A new test that asserts on time carries one of these labels.
# Each pass prints its own summary; either failing fails the target, after
# both ran.  CTEST_SERIAL_LABELS= (empty) runs one pass, CTEST_JOBS at a time.
CTEST_PAR_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST_SERIAL_LABELS ?= faults|multihost|agree|serial
CTEST_ARGS = --output-on-failure --timeout $(CTEST_TIMEOUT)
test: build
ifeq ($(strip $(CTEST_SERIAL_LABELS)),)
	cd $(BUILD) && ctest $(CTEST_ARGS) -j$(CTEST_JOBS)
else
	@cd $(BUILD) && st=0; \
	echo "=== make test: pass 1, $(CTEST_PAR_JOBS) at a time: tests checking bits/memory/results only"; \
	ctest $(CTEST_ARGS) -j$(CTEST_PAR_JOBS) -LE '$(CTEST_SERIAL_LABELS)' || st=1; \
	echo "=== make test: pass 2, $(CTEST_JOBS) at a time: tests labelled $(CTEST_SERIAL_LABELS)"; \
	ctest $(CTEST_ARGS) -j$(CTEST_JOBS) -L '$(CTEST_SERIAL_LABELS)' || st=1; \
	exit $$st
endif

# The long determinism sweep (issue 13; make test runs a subset): every
# plugin x N up to 32 x SCALE_REPEATS repeats x SCALE_STEPS steps with
# ZERO_DEBUG_JITTER on, in three configurations, bit for bit against stage0
# (tests/determinism/determinism.py).  Figures land in $(BUILD)/test-scale/.
SCALE_NP      ?= 2,3,5,8,9,12,16,24,32
SCALE_REPEATS ?= 5
SCALE_STEPS   ?= 50
SCALE_PLUGINS ?= stage0,stage1,stage2,stage3,offload,stage1-pp
SCALE_ARGS     = --demo $(BUILD)/examples/demo/zero-demo --plugins $(SCALE_PLUGINS) --np $(SCALE_NP) \
                 --repeats $(SCALE_REPEATS) --steps $(SCALE_STEPS) --jitter 50
test-scale: build
	@mkdir -p $(BUILD)/test-scale
	python3 tests/determinism/determinism.py $(SCALE_ARGS) --precision fp32 --gas 1 \
	  --out $(BUILD)/test-scale/fp32_gas1 --json $(BUILD)/test-scale/fp32_gas1.json
	python3 tests/determinism/determinism.py $(SCALE_ARGS) --precision bf16 --gas 1 --bucket 3000 \
	  --out $(BUILD)/test-scale/bf16_gas1_b3000 --json $(BUILD)/test-scale/bf16_gas1_b3000.json
	python3 tests/determinism/determinism.py $(SCALE_ARGS) --precision fp32 --gas 2 --bucket 3000 \
	  --out $(BUILD)/test-scale/fp32_gas2_b3000 --json $(BUILD)/test-scale/fp32_gas2_b3000.json

# The long fuzz run (issue 17; make test runs each target ZERO_FUZZ_SHORT_S
# = 20 s): each libFuzzer target for FUZZ_TIME seconds over a corpus kept in
# $(BUILD)/tests/fuzz/long-<target>/corpus, so that run after run grows it.
# Crashes land in .../artifacts/; executions and coverage in .../stats.txt.
FUZZ_TIME    ?= 600
FUZZ_TARGETS ?= config ckpt
fuzz: build
	@for t in $(FUZZ_TARGETS); do \
	  bash tests/fuzz/run-fuzz.sh $(BUILD)/tests/fuzz/targets/fuzz_$$t $$t $(BUILD)/tests/fuzz/long-$$t $(FUZZ_TIME) keep || exit 1; \
	done

# Sanitizers (issue 17; tools/sanitize-check.sh): ASan+UBSan+LSan over the
# test suite and TSan over the progress-thread and concurrent-hook tests
# plus stage 2/3 zero-demo at 9 ranks, each in its own build tree
# (build-asan/, build-tsan/).  SANITIZE_SET=ci runs ASan over the subset
# CI can afford (tools/sanitize-check.sh lists what it leaves out and why;
# .ci/run uses it); the default is the whole suite.  SANITIZE_MODES picks
# the modes.
SANITIZE_MODES ?= asan tsan
SANITIZE_SET   ?= full
check-sanitize: deps
	@for m in $(SANITIZE_MODES); do \
	  ASAN_SET=$(SANITIZE_SET) TSAN_SET=$(SANITIZE_SET) JOBS=$(JOBS) tools/sanitize-check.sh $$m || exit 1; \
	done

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
