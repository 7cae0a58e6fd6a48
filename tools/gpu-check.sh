#!/usr/bin/env bash
# tools/gpu-check.sh [OUTDIR]: one command that validates and measures the GPU
# path on a machine with an NVIDIA GPU (also: make gpu-check).
#
#   1. builds libzero with CUDA and NCCL (build dir $GPU_CHECK_BUILD, default
#      build-gpu; SASS for this machine's GPU only, so the build is quick),
#   2. runs `ctest -L gpu` (kernels vs the CPU kernels bitwise, the device
#      backend, NCCL, every stage plugin on device memory, zero.torch on CUDA
#      tensors vs DDP when python3 on PATH has torch),
#   3. runs the demo with --device cuda for every plugin on 1 rank (and on
#      one rank per GPU when several exist), fp32 and bf16, and compares each
#      with the CPU engine's stage0 (bitwise),
#   4. runs the GPU benches (ratios against the memory/NCCL bound),
# and writes OUTDIR/summary.json and OUTDIR/summary.txt (a readable table),
# plus one log per part.  OUTDIR defaults to gpu-check-<date>.
#
# Without a GPU (nvidia-smi lists none, or no nvcc) every part is reported
# "skipped" with the reason and the script exits 0, so CI can run it.  With a
# GPU it exits 1 when any part failed.  Budget: under 10 minutes on one H100.
#
# Environment: GPU_CHECK_BUILD (build dir), GPU_CHECK_ARCHS (CMake CUDA
# architectures, default "native"), GPU_CHECK_JOBS, NCCL_ROOT (passed to cmake),
# GPU_CHECK_CMAKE_FLAGS (extra cmake flags), GPU_CHECK_PARTS (default
# "build,ctest,demo,bench": a subset skips the rest).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" && out=$(cd "$out" && pwd)
build=${GPU_CHECK_BUILD:-$here/build-gpu}
archs=${GPU_CHECK_ARCHS:-native}
jobs=${GPU_CHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}
parts=${GPU_CHECK_PARTS:-build,ctest,demo,bench}
results="$out/results.tsv" # part <TAB> name <TAB> status <TAB> detail
: >"$results"

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ')" >>"$results"; }
want() { case ",$parts," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
now() { date +%s; }
t_start=$(now)

finish() {
  python3 - "$results" "$out" "$(($(now) - t_start))" "$gpu_desc" <<'EOF'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
out, wall, gpu = sys.argv[2], int(sys.argv[3]), sys.argv[4]
res = [dict(part=r[0], name=r[1], status=r[2], detail=r[3] if len(r) > 3 else "") for r in rows]
counts = {}
for r in res:
    counts[r["status"]] = counts.get(r["status"], 0) + 1
json.dump(dict(gpu=gpu, wall_s=wall, counts=counts, results=res), open(out + "/summary.json", "w"), indent=1)
w = max([len(r["part"] + "/" + r["name"]) for r in res] + [10])
lines = [f"gpu-check: {gpu}; {wall} s; " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())), ""]
for r in res:
    lines.append(f"{(r['part'] + '/' + r['name']).ljust(w)}  {r['status']:<7}  {r['detail']}")
open(out + "/summary.txt", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
  echo "gpu-check: summary in $out/summary.txt and $out/summary.json"
}

# --- Is there a GPU? ----------------------------------------------------
gpu_desc="none"
why_skip=""
ngpu=0
if ! command -v nvidia-smi >/dev/null 2>&1; then
  why_skip="no nvidia-smi on PATH (no NVIDIA driver)"
else
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  if [ "${ngpu:-0}" -eq 0 ]; then
    why_skip="nvidia-smi lists no GPU: $(nvidia-smi -L 2>&1 | head -n 1)"
  else
    gpu_desc="$ngpu x $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  fi
fi
if [ -z "$why_skip" ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  why_skip="no nvcc (CUDA toolkit) to build with"
fi
if [ -n "$why_skip" ]; then
  for p in build ctest demo bench; do record "$p" all skipped "$why_skip"; done
  finish
  exit 0
fi
echo "gpu-check: $gpu_desc; output in $out"

# --- 1. Build -------------------------------------------------------------
build_ok=0
if want build; then
  t=$(now)
  # the bindings' GPU tests need a Python whose torch has CUDA: the first python3 on PATH that imports torch
  pyflag=()
  if command -v python3 >/dev/null 2>&1 && python3 -c "import torch" >/dev/null 2>&1; then
    pyflag=("-DZERO_PYTHON=$(command -v python3)")
  fi
  # shellcheck disable=SC2086
  if cmake -S "$here" -B "$build" "${pyflag[@]}" -DCMAKE_BUILD_TYPE=Release -DZERO_WITH_CUDA=ON -DZERO_WITH_NCCL=ON \
      -DZERO_WERROR=OFF "-DCMAKE_CUDA_ARCHITECTURES=$archs" ${NCCL_ROOT:+-DNCCL_ROOT=$NCCL_ROOT} \
      ${GPU_CHECK_CMAKE_FLAGS:-} >"$out/build.log" 2>&1 &&
    cmake --build "$build" -j"$jobs" >>"$out/build.log" 2>&1; then
    build_ok=1
    record build cmake ok "$(($(now) - t)) s, archs $archs"
  else
    record build cmake FAILED "see build.log: $(grep -m1 -iE 'error' "$out/build.log")"
  fi
elif [ -d "$build" ]; then
  build_ok=1
  record build cmake skipped "GPU_CHECK_PARTS has no build; using $build as it is"
fi

# --- 2. ctest -L gpu --------------------------------------------------------
if want ctest; then
  if [ $build_ok = 1 ]; then
    (cd "$build" && ctest -L gpu --output-on-failure --timeout 400 --output-junit "$out/ctest-gpu.xml") \
      >"$out/ctest-gpu.log" 2>&1
    python3 - "$out/ctest-gpu.xml" >>"$results" <<'EOF' || record ctest junit FAILED "no JUnit output (see ctest-gpu.log)"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
for tc in root.iter("testcase"):
    st = tc.get("status", "run")
    status = {"run": "ok", "fail": "FAILED", "notrun": "skipped", "disabled": "skipped"}.get(st, st)
    detail = f"{float(tc.get('time', 0)):.1f} s"
    if status != "ok":
        txt = "".join((e.text or "") + " " + " ".join(f"{k}={v}" for k, v in e.attrib.items()) for e in tc)
        # the first line that explains itself
        for l in txt.splitlines():
            if any(k in l for k in ("SKIPPED", "FAIL", "error", "Error", "differ", "mismatch")):
                detail += "; " + l.strip()[:200]
                break
    print(f"ctest\t{tc.get('name')}\t{status}\t{detail}")
EOF
  else
    record ctest all skipped "build failed"
  fi
fi

# --- 3. The demo on the device, every plugin vs stage0 ----------------------
if want demo; then
  demo="$build/examples/demo/zero-demo"
  mpiexec=$(command -v mpirun || command -v mpiexec || true)
  if [ $build_ok != 1 ] || [ ! -x "$demo" ]; then
    record demo all skipped "no demo binary ($demo)"
  elif ! "$demo" --help 2>&1 | grep -q -- '--device'; then
    record demo all skipped "the demo has no --device option"
  else
    rank_counts="1"
    [ "$ngpu" -gt 1 ] && rank_counts="1 $ngpu"
    run_demo() { # NP DEVICE PLUGIN CONFIG LOG SUMMARY
      local cfg=()
      [ "$4" != default ] && cfg=(--config "$here/examples/configs/$4.json")
      if [ -n "$mpiexec" ]; then
        timeout 300 "$mpiexec" --allow-run-as-root --oversubscribe -np "$1" --mca btl self,vader \
          "$demo" --device "$2" --plugin "$3" "${cfg[@]}" --steps 20 --quiet --summary "$6" >"$5" 2>&1
      else
        timeout 300 "$demo" --device "$2" --plugin "$3" "${cfg[@]}" --steps 20 --quiet --summary "$6" >"$5" 2>&1
      fi
    }
    compare() { # REF.json GOT.json -> "equal ..." / "DIFFERENT ..."
      python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ka, kb = a.get("digest"), b.get("digest")
la, lb = a.get("final_loss"), b.get("final_loss")
print(("equal" if ka == kb else "DIFFERENT") + f" digest sum {kb.get('sum')!r} vs {ka.get('sum')!r}; loss {lb} vs {la}")
EOF
    }
    # fp32 runs gradient_accumulation_steps 2 with clipping (bf16.json without bf16): the
    # case that still differs from the CPU in the last bits (docs/gpu.md, Status)
    for cfgname in default bf16 fp32; do
      for np in $rank_counts; do
        tag="np$np-$cfgname"
        # The CPU engine's stage0 is the reference: the GPU kernels and the
        # NCCL reductions must reach the same bits.
        ref="$out/demo-$tag-cpu-stage0.json"
        if ! run_demo "$np" cpu stage0 "$cfgname" "$out/demo-$tag-cpu-stage0.log" "$ref"; then
          record demo "$tag-cpu-stage0" FAILED "the CPU reference run failed: $(tail -n 2 "$out/demo-$tag-cpu-stage0.log" | tr '\n' ' ')"
          continue
        fi
        for plugin in stage0 stage1 stage2 stage3 offload; do
          log="$out/demo-$tag-$plugin.log"
          sum="$out/demo-$tag-$plugin.json"
          t=$(now)
          if ! run_demo "$np" cuda "$plugin" "$cfgname" "$log" "$sum"; then
            record demo "$tag-$plugin" FAILED "exit $?: $(grep -m1 -iE 'error|failed' "$log" | cut -c1-300)"
            continue
          fi
          verdict=$(compare "$ref" "$sum")
          case "$verdict" in
            equal*) record demo "$tag-$plugin" ok "$(($(now) - t)) s; = CPU stage0 bitwise; $verdict" ;;
            *) record demo "$tag-$plugin" FAILED "vs CPU stage0: $verdict" ;;
          esac
        done
      done
    done
  fi
fi

# --- 4. GPU benches ---------------------------------------------------------
if want bench; then
  found=0
  for b in "$build"/bench/*/bench_gpu_*; do
    [ -x "$b" ] || continue
    found=1
    name=$(basename "$b")
    run=("$b")
    # the NCCL bench runs one rank per GPU (with one GPU it checks the path only, and says so)
    if [ "$name" = bench_gpu_nccl ] && command -v mpirun >/dev/null 2>&1; then
      run=(mpirun --allow-run-as-root --oversubscribe -np "$ngpu" --mca btl self,vader "$b")
    fi
    if timeout 300 "${run[@]}" >"$out/$name.log" 2>&1; then
      record bench "$name" ok "$(grep -E '^(RESULT|ratio|NOTE)' "$out/$name.log" | tr '\n' ';' | cut -c1-600)"
    else
      record bench "$name" FAILED "exit $?: $(tail -n 2 "$out/$name.log" | tr '\n' ' ')"
    fi
  done
  [ $found = 1 ] || record bench all skipped "no bench_gpu_* programs in $build/bench"
  # Issue 18's overlap goal (exposed communication <= 10 % of the overlap-off
  # figure) needs a core per rank plus one for each progress thread, which
  # the 2-core CI machines do not have and these machines do: the CPU engine's
  # bench_overlap at N = 2 with 1 and 2 compute threads per rank.
  ovl="$build/bench/overlap/bench_overlap"
  if [ -x "$ovl" ] && command -v mpirun >/dev/null 2>&1 && [ "$(nproc)" -ge 6 ]; then
    for t in 1 2; do
      if ZERO_PLUGIN_PATH="$build/plugins" timeout 300 mpirun --allow-run-as-root -np 2 --mca btl self,vader \
           -x ZERO_PLUGIN_PATH "$ovl" --reps 7 --compute-threads "$t" >"$out/bench_overlap_t$t.log" 2>&1; then
        record bench "bench_overlap_cpu_t$t" ok "$(grep -E '^N=|=>' "$out/bench_overlap_t$t.log" | tr '\n' ';' | cut -c1-900)"
      else
        record bench "bench_overlap_cpu_t$t" FAILED "exit $?: $(tail -n 2 "$out/bench_overlap_t$t.log" | tr '\n' ' ')"
      fi
    done
  fi
fi

finish
if grep -q $'\tFAILED\t' "$results"; then exit 1; fi
exit 0
