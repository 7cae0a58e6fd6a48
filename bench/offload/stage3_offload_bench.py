#!/usr/bin/env python3
"""bench/offload: stage 3 with offload (issue 20).  Two measurements, each
printed as ratios taken in one run (the machine is shared and noisy: never
read a lone absolute time).

A. Largest model per rank within a fixed device-tier budget, by plugin.
   The demo-style host (tests/memory/memory_sweep_host: per layer a
   LAYER-element weight and a 64-element bias, forward gathers each layer,
   backward gathers it again and hands in its gradients, zero_step) trains
   models of L layers at N ranks; the accountant's device-tier peak
   (zero_memory_stats, maximum over ranks) must stay within BUDGET bytes.
   For each variant the largest L that fits is found by doubling and
   bisection (every probe is a real training run, not a plan), capped at
   MAX_LAYERS.  Variants: stage2, stage3, offload (ZeRO-2 + CPU optimizer),
   stage3-offload (stage 3 + offload_optimizer cpu), stage3-offload-param
   (+ offload_param cpu), stage3-nvme (+ optimizer tiles on NVMe under
   --nvme), stage3-nvme-param (+ the parameter shard on NVMe too, a
   3-piece window in host memory).  Printed: parameters at the largest fitting size, that size
   relative to stage2's, its device and host peaks, and the median
   iteration time there (and per million parameters).

B. The tiled CPU-optimizer pipeline against a sequential step, in ONE run:
   ZERO_OFFLOAD_SEQUENTIAL=alternate makes the plugin step pipelined and
   sequential on alternate optimizer steps of the same engine (same memory,
   same files, the same load at the same moment) and log the medians of
   both and of the per-pair ratios (first pair left out).  One model
   (--pipe-layers x LAYER), N=1, sub_group_size --tile, --pairs pairs per
   run, --reps runs per variant: stage3-offload (each tile's new weights
   copied to the device-tier shard: on a CPU-only machine a memcpy),
   stage3-nvme (master and states written back / read in per tile, AIO) and
   stage3-nvme-param (also the 16-bit shard written to its file).
   Printed per variant: each run's median ratio, and the median over runs.

Usage: stage3_offload_bench.py [--build build] [--np 2] [--budget 1048576]
       [--layer 5000] [--max-layers 2048] [--nvme DIR] [--reps 5]
       [--pipe-layers 200] [--tile 250000] [--pairs 10] [--skip-a] [--skip-b]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

VARIANTS = ["stage2", "stage3", "offload", "stage3-offload", "stage3-offload-param", "stage3-nvme", "stage3-nvme-param"]


def run_host(a, variant, layers, np_, steps, extra_env=None, zo=None, want=None):
    env = dict(os.environ)
    env["ZERO_SWEEP_ZO"] = zo if zo is not None else a.zo
    env["ZERO_SWEEP_NVME"] = a.nvme
    env["ZERO_LOG_LEVEL"] = "info"
    env["ZERO_PLUGIN_PATH"] = os.path.join(a.build, "plugins")
    if extra_env:
        env.update(extra_env)
    numel = layers * (a.layer + 64)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_), "--mca", "btl", "self,vader",
           a.host, variant, str(numel), str(steps), str(layers)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    r = json.loads(lines[-1])
    m = re.search(r"rank 0\].*stage3: offload: \d+ steps of \d+ tile\(s\); per step ([0-9.]+) ms, of which CPU "
                  r"optimizer ([0-9.]+) ms and ([0-9.]+) ms waiting", out.stdout + out.stderr)
    if m:
        r["tiled_ms"], r["cpu_ms"], r["wait_ms"] = (float(x) for x in m.groups())
    if want is not None:
        r["interleaved"] = want.search(out.stdout + out.stderr)
        if not r["interleaved"]:
            sys.exit(f"bench: no interleaved figures from {' '.join(cmd)}:\n{out.stderr[-2000:]}")
    return r


def largest_fit(a, variant):
    """Largest layer count whose measured device peak fits the budget."""
    fits = {}

    def probe(l):
        if l not in fits:
            r = run_host(a, variant, l, a.np, 3)
            fits[l] = r if r["dev_peak"] <= a.budget else None
        return fits[l]

    if not probe(1):
        return None, 0
    lo, hi = 1, 2
    while hi <= a.max_layers and probe(hi):
        lo, hi = hi, hi * 2
    if hi > a.max_layers:
        if lo < a.max_layers and probe(a.max_layers):
            return fits[a.max_layers], a.max_layers
        hi = a.max_layers
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return fits[lo], lo


def part_a(a):
    print(f"A. largest model per rank within a device-tier budget of {a.budget} bytes, N = {a.np}, layers of "
          f"{a.layer}+64 elements (fp32, AdamW), cap {a.max_layers} layers; load {open('/proc/loadavg').read().split()[:3]}")
    rows = {}
    for v in VARIANTS:
        r, l = largest_fit(a, v)
        rows[v] = (r, l)
        if r is None:
            print(f"  {v:<22} nothing fits")
            continue
        print(f"  {v:<22} {l:5d} layers{' (cap)' if l == a.max_layers else '      '} {r['numel']:>11,d} params  "
              f"device peak {r['dev_peak']:>9,d}  host peak {r['host_peak']:>12,d}  step {r['step_ms']:8.2f} ms")
    base = rows["stage2"][0]
    print("  relative to stage2 (model size; step time per million parameters):")
    for v in VARIANTS:
        r, l = rows[v]
        if r is None or base is None:
            continue
        per = r["step_ms"] / (r["numel"] / 1e6)
        base_per = base["step_ms"] / (base["numel"] / 1e6)
        print(f"  {v:<22} model x{r['numel'] / base['numel']:6.2f}{'+' if l == a.max_layers else ' '}  "
              f"step/Mparam {per:8.2f} ms (x{per / base_per:5.2f})")
    return rows


def part_b(a):
    zo = a.zo_base + f', "sub_group_size": {a.tile}'
    print(f"\nB. tiled CPU optimizer, pipelined vs sequential, interleaved in one run (ZERO_OFFLOAD_SEQUENTIAL="
          f"alternate), N = 1, {a.pipe_layers} layers ({a.pipe_layers * (a.layer + 64):,d} params), tiles of "
          f"{a.tile}, {a.pairs} pairs per run, {a.reps} runs; load {open('/proc/loadavg').read().split()[:3]}")
    pat = re.compile(r"rank 0\].*interleaved (\d+) pairs of (\d+) tile\(s\): tiled phase median pipelined ([0-9.]+) ms, "
                     r"sequential ([0-9.]+) ms, pipelined/sequential ([0-9.]+) \(min ([0-9.]+), max ([0-9.]+)\)")
    for v in ("stage3-offload", "stage3-nvme", "stage3-nvme-param"):
        runs = []
        for _ in range(a.reps):
            r = run_host(a, v, a.pipe_layers, 1, 2 * a.pairs + 2, {"ZERO_OFFLOAD_SEQUENTIAL": "alternate"}, zo=zo,
                         want=pat)
            runs.append(tuple(float(x) for x in r["interleaved"].groups()[2:]))
        ratios = [x[2] for x in runs]
        med = lambda i: statistics.median(x[i] for x in runs)
        print(f"  {v:<18} pipelined/sequential {statistics.median(ratios):.3f} (runs: "
              f"{', '.join(f'{x:.3f}' for x in ratios)}); tiled phase median pipelined {med(0):.2f} ms, "
              f"sequential {med(1):.2f} ms; load {open('/proc/loadavg').read().split()[0]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--build", default=os.path.join(root, "build"))
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--budget", type=int, default=1 << 20)
    p.add_argument("--layer", type=int, default=5000)
    p.add_argument("--max-layers", type=int, default=2048)
    p.add_argument("--nvme", default="")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--pipe-layers", type=int, default=200)
    p.add_argument("--tile", type=int, default=250000)
    p.add_argument("--skip-a", action="store_true")
    p.add_argument("--skip-b", action="store_true")
    a = p.parse_args()
    a.host = os.path.join(a.build, "tests", "memory", "memory_sweep_host")
    if not os.access(a.host, os.X_OK):
        sys.exit(f"bench: {a.host} not built (cmake --build {a.build} --target memory_sweep_host zero-plugin-stage3)")
    tmp = None
    if not a.nvme:
        tmp = tempfile.TemporaryDirectory(prefix="zero-bench-nvme-")
        a.nvme = tmp.name
    # the gather window (stage 3): three layers live, two prefetched; buckets of two layers; no persistence
    a.zo_base = (f', "stage3_max_live_parameters": {3 * a.layer}, "stage3_prefetch_bucket_size": {2 * a.layer}, '
            f'"reduce_bucket_size": {2 * a.layer}, "stage3_param_persistence_threshold": 0')
    a.zo = a.zo_base + ', "sub_group_size": 100000'
    if not a.skip_a:
        part_a(a)
    if not a.skip_b:
        part_b(a)


if __name__ == "__main__":
    sys.exit(main())
