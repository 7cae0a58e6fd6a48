#!/usr/bin/env bash
# Build libzero with sanitizers and run its tests under them, outside ctest's
# own pass/fail view: every sanitizer report in the logs fails the run, even
# one from a test that passed.
#
#   tools/sanitize-check.sh [asan|tsan] [extra ctest arguments...]
#
#   asan (default): AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer,
#        Debug build at -O1 in build-asan/, every test except the `bench` and `gpu`
#        labels.
#   tsan: ThreadSanitizer, build-tsan/, the tests that run threads: the comm
#        progress thread (comm_mpi_*), hooks from several threads into the
#        bucket engine (stages_*, stage3_equiv_*, offload_equivalence_*,
#        offload_block_final_*), the accountant (memory), logging (log.*),
#        the ring order test at N = 3/9/12 with jitter (comm_ring_order_*);
#        then (issue 13) zero-demo with stage2 and stage3 on TSAN_DEMO_NP
#        ranks (default 9: above 8, where partitions are smaller than a
#        bucket and the allgather is the ring), ZERO_DEBUG_JITTER on,
#        TSAN_DEMO_STEPS steps (default 2); TSAN_DEMO=0 skips it,
#        TSAN_DEMO_PLUGINS picks the plugins.  TSAN_SET=ci: CI's subset
#        (below).
#
# Environment: BUILD_DIR (default build-asan / build-tsan next to the
# sources), JOBS (default 2), TESTS (a ctest -R regex replacing the default
# selection; asan always adds the loader tests, which take milliseconds),
# EXCLUDE (a ctest -E regex of tests left out; the fuzz_* tests always are:
# they run clang-built fuzzers that carry ASan+UBSan already, unaffected by
# this build), ASAN_SET=ci (the subset CI runs, below: EXCLUDE then adds
# to it),
# SKIP_BUILD=1 (reuse an existing build), BUILD_ONLY=1 (build and stop: .ci/run
# builds both trees in the background while make test runs).  Logs:
# $BUILD_DIR/sanitize-*.log.
#
# How Open MPI is kept out of the verdict (it is not built with sanitizers):
#  - LSan: tests/sanitizers/lsan.supp suppresses leaks whose allocation stack
#    passes through Open MPI's libraries, and
#    tests/sanitizers/keep_modules.c (LD_PRELOAD) turns dlclose into a no-op
#    so that frames in unloaded modules (Open MPI's mca_* components,
#    libzero's plugins) still name their library.  The loader tests check
#    that plugins really are unloaded, so they run without that shim.
#    Allocation stacks are unwound with frame pointers (ASan's default,
#    fast_unwind_on_malloc=1; 1.7.7): the frame of Open MPI that called
#    malloc is there (the caller of an intercepted malloc always is), the
#    rest of a stack through code without frame pointers is not, so a
#    string Open MPI made with asprintf stops in glibc's vasprintf and is
#    suppressed there (libzero never calls asprintf: lint.no_asprintf).  The
#    slow unwinder (=0) took 1.43x the time on CI's ASan set (406.6 s
#    against 285.5 and 281.5 s, one build, this 2-core machine).
#    asan_lsan_selftest_np2 checks the combination: a leak of ours is
#    reported, every Open MPI one in the same process suppressed.
#  - TSan: tests/sanitizers/tsan.supp suppresses races whose stacks are inside
#    libmpi / libopen-pal (their shared-memory transport synchronises through
#    memory TSan does not see).  Reports with a libzero frame are kept.
#    tsan_selftest_np2 checks it: a race of ours is reported, none of Open
#    MPI's in the same process.
# Sanitizer builds use ZERO_WERROR=OFF: instrumentation (and -O1) changes
# GCC's flow analysis and produces warnings (e.g. -Wformat-truncation) that
# the normal -Werror build does not have; they are still printed.
set -uo pipefail

mode=${1:-asan}
case "$mode" in
asan | tsan) shift || true ;;
-*) mode=asan ;;
*)
    echo "usage: $0 [asan|tsan] [ctest args...]" >&2
    exit 2
    ;;
esac

src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build-$mode}
jobs=${JOBS:-2}
supp=$src/tests/sanitizers
# shellcheck source=../tests/sanitizers/options.sh
. "$supp/options.sh"

if [ "$mode" = asan ]; then
    san="-fsanitize=address,undefined"
    # -O1 (ASan's documented level; TSan below has always had it): the -O0
    # of a plain Debug build made the instrumented runs ~1.4x slower (CPU
    # seconds of a 4-rank stage3 zero-demo run: 3.8 -> 2.7).  The price:
    # an access -O1 removes (a dead load, a local kept in a register) is
    # not checked; every access whose value is used still is.
    cflags="$san -fno-omit-frame-pointer -O1"
    btype=Debug
else
    san="-fsanitize=thread"
    cflags="$san -fno-omit-frame-pointer -O1"
    btype=Debug
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
    mkdir -p "$build"
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=$btype -DCMAKE_C_FLAGS="$cflags" \
        -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" -DCMAKE_MODULE_LINKER_FLAGS="$san" \
        -DZERO_WITH_CUDA=OFF -DZERO_WERROR=OFF -DZERO_BUILD_FUZZ=OFF >"$build/sanitize-configure.log" 2>&1 ||
        { cat "$build/sanitize-configure.log"; exit 1; }
    cmake --build "$build" -j"$jobs" >"$build/sanitize-build.log" 2>&1 ||
        { tail -40 "$build/sanitize-build.log"; echo "sanitize-check: build failed" >&2; exit 1; }
fi
if [ "${BUILD_ONLY:-0}" = 1 ]; then
    echo "sanitize-check: $mode build ready in $build"
    exit 0
fi

# dlclose no-op shim (tests/sanitizers/CMakeLists.txt builds it, not
# instrumented: it only replaces one libc function)
shim=$build/tests/sanitizers/libzero-keep-modules.so
[ "$mode" != asan ] || [ -e "$shim" ] || { echo "sanitize-check: $shim was not built" >&2; exit 1; }

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
logs=()
run_ctest() { # name, env..., -- ctest args...
    local name=$1
    shift
    local envs=()
    while [ "$1" != -- ]; do
        envs+=("$1")
        shift
    done
    shift
    local log=$build/sanitize-$mode-$name.log
    logs+=("$log")
    echo "sanitize-check: $mode $name: ctest $*"
    env "${envs[@]}" ctest --test-dir "$build" -j"$jobs" --output-on-failure "$@" >"$log" 2>&1
    local rc=$?
    grep -E "tests passed|Failed|Timeout" "$log" | grep -vE "^ *[0-9]+/[0-9]+ Test" || true
    return $rc
}

status=0
if [ "$mode" = asan ]; then
    common=(ASAN_OPTIONS=$zero_asan_options LSAN_OPTIONS=$zero_lsan_options)
    sel=${TESTS:-.}
    # ASAN_SET=ci: the whole suite under ASan takes far longer than CI's
    # budget (the demo- and sweep-driven tests run zero-demo for many steps,
    # 10-20x slower instrumented: demo_stages_agree alone passes 300 s), so
    # CI leaves out what repeats code the rest covers: the determinism and
    # precision sweeps, the zero-demo-driven tests (demo_*, *_demo*,
    # memory_stage_sweep, ckpt_kill), the Python/torch bindings (the
    # interpreter is not instrumented), install-deps.sh's test (a shell
    # script; install.template runs: the installed kit, the template and
    # its hosts built with this build's flags), the largest world
    # sizes of tests that also run smaller (np4 where np2/np3 run, ring order
    # at 12 where 9 runs; the precision and measured-planner tests, which
    # time or train many steps, run at np1 only), np2 where the same test
    # runs at np3 (stages_equivalence, stage3_equiv, stages_checkpoint,
    # offload_checkpoint, device_dispatch, peers_bitwise: nothing in the
    # comm backend, the bucket engine or the plugins special-cases two
    # ranks, and np3 adds the uneven partitions), the stage-3 offload
    # memory sweeps (memory_stage3_offload_sweep, memory_stage3_nvme_param_
    # sweep: the accountant's figures over model depths, on the offload
    # paths that stage3_offload_ckpt and stage3_nvme_param_errors run here
    # -- optimizer in host memory and NVMe, the shard in host memory and
    # NVMe, saved, resumed, resharded) and ckpt_tool (a 64 MiB fixture).  The zero-demo-driven tests that stay (contrib.*,
    # stage3_offload_ckpt, stage3_nvme_param_errors, config_hf_examples,
    # trace_valid) train on one file of the demo's corpus
    # (tests/CMakeLists.txt: the validation pass over the full one took
    # most of their instrumented time).  What stays
    # covers every plugin (stages_*, stage3_*, offload_*, pipeline_engine_*
    # for stage1-pp), the comm engine (comm_*, every variant), buckets,
    # checkpoints (resume, convert, steps, pipeline, unit), config, loader,
    # ABI, optimizer kernels, planner and the C++ bindings.
    if [ "${ASAN_SET:-full}" = ci ]; then
        ci='determinism_|precision_stage_trajectories|precision_np[234]|pipeline_demo_|ckpt_kill|ckpt_tool|demo_'
        ci+='|memory_stage_sweep|offload_demo|stage3_demo_peak|buckets_demo_|bindings\.torch|bindings\.python'
        ci+='|install\.deps_script|plan_paper|plan_measured_np[234]|stages_equivalence_np4|stage3_equiv_np4'
        ci+='|offload_equivalence_np4|offload_precision_np4|comm_mpi_small_chunks_np4|comm_ring_order_np12|multihost'
        ci+='|stages_host_comm_np5|comm_host_np5' # (1.5) np1/np3 run: five instrumented ranks crowd the timing tests
        ci+='|comm_mpi_shared_np[259]' # (1.5.1) the shared-memory collectives: np3 and the variants run
        ci+='|stages_equivalence_np2|stage3_equiv_np2|stages_checkpoint_np2|offload_checkpoint_np2|device_dispatch_np2'
        ci+='|peers_bitwise_np2' # np3 runs each
        ci+='|memory_stage3_offload_sweep|memory_stage3_nvme_param_sweep'
        # (1.5.2) the issue-31 agreements at 9 and 11 ranks: np2/np3/np4 run
        ci+='|stages_grads_agree_np9|faults_agree_plugin_np9|agree_same_np11'
        # the progress stress (100 all-gather pairs of 2.5 MB): small_chunks_np4's path, left out with it
        ci+='|comm_mpi_progress_stress_np4'
        # ckpt_mutate runs zero-ckpt ~600 times (every manifest field, every blob's
        # bit flips): about 200 s of instrumented process starts; the manifest
        # parser and validator are under ASan+UBSan in fuzz_ckpt.  The pip wheel
        # test builds an uninstrumented libzero of its own: nothing to sanitize
        ci+='|ckpt_mutate_np2|bindings\.pip'
        # (1.7) the hierarchical-qgZ world sweep (N = 3..9, four 100-step demo runs each: ~100 s plain, past its
        # 600 s limit instrumented); the same exchange runs instrumented in contrib.plan_np4_nodes2 (N=4, 2 per
        # node) and contrib.zeropp_device_np6_nodes2/3
        ci+='|contrib\.zeropp\.qgz'
        # (1.7.6) repeats of code another contrib test runs instrumented: the 300-step 1-bit Adam curve
        # (contrib.onebit runs the same warm-up, freeze and compressed exchange: ~100 s instrumented); the
        # contrib plan at N = 4 and 6 (np3 and np4_nodes2, which adds the cross-node step, run: ~45 s)
        ci+='|contrib\.onebit\.curve|contrib\.plan_np[46]$'
        # (1.8.1) contrib.zeropp (~35 s instrumented): its switches run instrumented in contrib.plan_np3 (each
        # alone and all three, fp32 and bf16), the cross-node qgZ in contrib.plan_np4_nodes2 and
        # contrib.zeropp_device_np6_nodes2/3, its checkpoints in contrib.reshard; what it adds is loss curves
        # and byte counts, which the plain run checks
        ci+='|contrib\.zeropp$'
        # (1.8.1) the host-write check at 5 ranks (~23 s instrumented): np1 and np3 run it, as under TSan
        ci+='|stages_host_writes_np5'
        # (1.9) zero-demo fine-tuning (three demo runs): the weights-only load runs instrumented in ckpt_weights_*
        ci+='|ckpt_finetune_demo'
        # (1.10) the expert-group planner against the accountant (~62 s instrumented at N = 4, 6, 9): plan_auto_np4
        # plans and trains expert groups instrumented (stage0, stage1, stage2, stage3); and the MoE demo's cross-plugin
        # digests (~18 s: twenty demo runs), whose code moe_demo_* and moe_ckpt_reshard run instrumented
        ci+='|plan_measured_experts_np[469]|moe_demo_plugins_agree'
        # (1.11) zero_params_write at 4 and 9 ranks: np3 (odd, refusals, NVMe) and np6 (experts, pipeline) run
        ci+='|stages_params_write_np[49]'
        EXCLUDE="^($ci)${EXCLUDE:+|$EXCLUDE}"
    fi
    excl="^loader\.|^fuzz_${EXCLUDE:+|$EXCLUDE}"
    run_ctest suite "${common[@]}" LD_PRELOAD="$shim" -- -LE "bench|gpu|fuzz" -R "$sel" -E "$excl" --no-tests=ignore "$@" ||
        status=1
    # the loader tests check that plugins are really unloaded: no shim
    run_ctest loader "${common[@]}" -- -R "^loader\." --no-tests=ignore "$@" || status=1
else
    tsan_opts=$zero_tsan_options
    # (1.3) plus the threads 1.3 added: the tracer on the progress thread
    # (trace_*), the step timing's atomic sums, expert-group comms, and the
    # bounded waits (comm_timeout_*; their deliberate leaks are LSan's
    # business, not TSan's).
    sel=${TESTS:-"^(comm_mpi_|comm_ring_order_|comm_self|memory$|log\.|stages_|stage3_equiv_|offload_equivalence_|offload_block_final_|trace_unit$|trace_valid$|timing_step_timing_np2$|moe_np4$|comm_timeout_np3$|tsan_selftest_np2$)"}
    # TSAN_SET=ci (issue 17, CI's time): the same paths at fewer world
    # sizes -- each test at np2/np3 where it also runs at np4 (the ring
    # allgather and no-thread variants, np4 only, stay), ring order at 3 and
    # 9 -- and the 9-rank zero-demo with stage3 only (its gathers and its
    # reduce-scatter both run on the progress thread).  (1.7.6) The host-write
    # check (stages_host_writes_*) starts no thread of its own: np1 keeps the
    # engine's threads under TSan beside it, np3/np5 (~40 s instrumented) only
    # repeat it at more ranks.  (1.8.1) stages_equivalence at np2 only (~30 s
    # instrumented at np3): the odd world changes the partition arithmetic,
    # which ASan and the plain run check, not which threads touch what.
    tsan_excl=()
    demo_plugins=${TSAN_DEMO_PLUGINS:-stage2 stage3}
    if [ "${TSAN_SET:-full}" = ci ]; then
        tsan_excl=(-E "^(stages_equivalence_np3|comm_mpi_np4|comm_mpi_small_chunks_np4|comm_mpi_progress_stress_np4|stages_[a-z_]+_np9|comm_mpi_host_(single|multiple)_np4|comm_mpi_shared_np[59]|comm_ring_order_np12|stages_[a-z_]+_np4|stages_host_comm_np5|stages_host_writes_np[35]|stages_params_write_np[36]|stage3_equiv_np4|offload_equivalence_np4|offload_block_final_np4)\$${EXCLUDE:+|$EXCLUDE}")
        demo_plugins=${TSAN_DEMO_PLUGINS:-stage3}
    elif [ -n "${EXCLUDE:-}" ]; then
        tsan_excl=(-E "$EXCLUDE")
    fi
    run_ctest threads TSAN_OPTIONS="$tsan_opts" -- -LE "bench|gpu" -R "$sel" "${tsan_excl[@]}" "$@" || status=1
    # Multi-rank stage 2 and stage 3 above 8 ranks (issue 13), every rank
    # under TSan with its progress thread and the jitter knob on.
    if [ "${TSAN_DEMO:-1}" != 0 ]; then
        np=${TSAN_DEMO_NP:-9}
        # one file of the demo's corpus, as in ctest (tests/CMakeLists.txt):
        # the final validation pass over the whole one is most of a 2-step run
        data=()
        [ -e /usr/share/common-licenses/GPL-3 ] && data=(--data /usr/share/common-licenses/GPL-3)
        for plugin in $demo_plugins; do
            log=$build/sanitize-tsan-demo-$plugin-np$np.log
            logs+=("$log")
            echo "sanitize-check: tsan zero-demo --plugin $plugin on $np ranks"
            TSAN_OPTIONS="$tsan_opts" ZERO_DEBUG_JITTER=50 timeout 900 \
                mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader \
                -x TSAN_OPTIONS -x ZERO_DEBUG_JITTER "$build/examples/demo/zero-demo" "${data[@]}" --plugin "$plugin" \
                --steps "${TSAN_DEMO_STEPS:-2}" --quiet >"$log" 2>&1 || {
                echo "sanitize-check: zero-demo $plugin failed (see $log)" >&2
                status=1
            }
        done
    fi
fi

# Any report fails the run, even in a test that passed.
pattern="ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer"
for log in "${logs[@]}"; do
    n=$(grep -cE "$pattern" "$log" || true)
    if [ "$n" != 0 ]; then
        echo "sanitize-check: $n sanitizer report(s) in $log" >&2
        grep -nE "$pattern" "$log" | head -20 >&2
        status=1
    fi
done
[ $status = 0 ] && echo "sanitize-check: $mode clean" || echo "sanitize-check: $mode FAILED (logs: ${logs[*]})" >&2
exit $status
