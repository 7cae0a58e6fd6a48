#!/bin/sh
# tools/gpu-check.sh on a machine without a GPU: exits 0 and reports every
# part (build, ctest, demo, bench) as skipped with the reason, in both
# summary files.  Then its bookkeeping against a stand-in GPU (a fake
# nvidia-smi and nvcc on PATH, a build folder holding one fake bench): the
# parts in the order GPU_CHECK_PARTS names them, an unknown part reported,
# a bench's RESULT lines recorded, and GPU_CHECK_DEADLINE skipping what
# would start past it.  With a GPU this test is skipped (77): there,
# gpu-check itself is the check, and a full run takes minutes.
set -u
src=$1
work=$2
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${n:-0}" -gt 0 ]; then
    echo "SKIPPED: $n GPU(s) present: run tools/gpu-check.sh itself"
    exit 77
fi
rm -rf "$work"
if ! "$src/tools/gpu-check.sh" "$work" >"$work.log" 2>&1; then
    echo "FAIL: gpu-check.sh exited non-zero without a GPU"; cat "$work.log"; exit 1
fi
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
parts = {r["part"]: r for r in s["results"]}
bad = [p for p in ("build", "ctest", "demo", "bench") if p not in parts or parts[p]["status"] != "skipped" or not parts[p]["detail"]]
assert not bad, f"parts not reported skipped with a reason: {bad}: {s}"
assert set(s["counts"]) == {"skipped"}, s["counts"]
txt = open(d + "/summary.txt").read()
assert txt.count("skipped") >= 4, txt
print("gpu-check without a GPU:", parts["build"]["detail"])
PY
[ $? = 0 ] || exit 1

# --- a stand-in GPU: the bookkeeping, without a device ---------------------
fake=$work-fake
rm -rf "$fake"
mkdir -p "$fake/bin" "$fake/build/bench/gpu"
cat >"$fake/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in *-L*) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;; *) echo "Stand-in GPU, 0.0" ;; esac
EOF
printf '#!/bin/sh\necho "nvcc stand-in"\n' >"$fake/bin/nvcc"
printf '#!/bin/sh\necho "RESULT stand-in ratio 1.000"\n' >"$fake/build/bench/gpu/bench_gpu_standin"
chmod +x "$fake/bin/nvidia-smi" "$fake/bin/nvcc" "$fake/build/bench/gpu/bench_gpu_standin"
for deadline in 300 0; do
    out=$fake/out-$deadline
    PATH="$fake/bin:$PATH" GPU_CHECK_BUILD="$fake/build" GPU_CHECK_PARTS=bench,nosuchpart \
        GPU_CHECK_DEADLINE=$deadline "$src/tools/gpu-check.sh" "$out" >"$out.log" 2>&1
    python3 - "$out" "$deadline" <<'PY' || { cat "$out.log"; exit 1; }
import json, sys
d, deadline = sys.argv[1], int(sys.argv[2])
s = json.load(open(d + "/summary.json"))
assert s["gpu"].startswith("1 x Stand-in GPU"), s["gpu"]
rows = [(r["part"], r["name"], r["status"], r["detail"]) for r in s["results"]]
names = [(p, n) for p, n, _, _ in rows]
# the build part (not asked for) uses the folder as it is; then bench; then the unknown part
assert names[0] == ("build", "cmake") and rows[0][2] == "skipped", rows
assert names.index(("bench", "bench_gpu_standin")) < names.index(("nosuchpart", "all")), rows
row = {(p, n): (st, de) for p, n, st, de in rows}
assert row[("nosuchpart", "all")][0] == "skipped" and "unknown part" in row[("nosuchpart", "all")][1], rows
st, de = row[("bench", "bench_gpu_standin")]
if deadline > 0:
    assert st == "ok" and "RESULT stand-in ratio 1.000" in de, rows
else:
    assert st == "skipped" and "GPU_CHECK_DEADLINE (0 s) reached" in de, rows
print("gpu-check with a stand-in GPU, deadline %d s: bench_gpu_standin %s (%s)" % (deadline, st, de))
PY
done
