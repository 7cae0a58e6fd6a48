#!/usr/bin/env python3
"""Issue 20: stage 3 with offload keeps the device tier at the gather window.

memory_sweep_host trains a model of LAYERS x (20,000-element weight +
64-element bias) with a fixed gather window (stage3_max_live_parameters
60,000, prefetch 40,000, reduce_bucket_size 40,000, no persistent params),
for LAYERS = 4, 16, 64 (a 16x deeper model), at N = 1 and 3, three ways:
stage3, stage3 + offload_optimizer cpu, and + offload_param cpu.  Checks, on
the accountant's device-tier peak (maximum over ranks):

  1. offload_param < offload_optimizer only < stage3, at every size;
  2. offload_param does not grow with the model: it stays within the
     window's bound (gather budget 4 * max_live + two bucket slots of
     4 * max(bucket, largest param)) at every size, and max/min over the
     sizes <= 1.15 for a 16x deeper model (what varies is the released
     buffers the reuse distance keeps inside the budget: a deeper model
     keeps more of its small biases for the backward, up to the budget);
     stage3 meanwhile grows at least 4x over the same sweep (its shard,
     gradient and optimizer state scale with the model);
  3. the host tier of offload_param grows with the model (the state moved
     there) and every variant trains to the same digest.
Usage: offload3_sweep.py MEMORY_SWEEP_HOST [MPIEXEC]
"""
import json
import os
import subprocess
import sys

LAYER, BIAS = 20000, 64
MAX_LIVE, BUCKET = 60000, 40000
ZO = (f', "stage3_max_live_parameters": {MAX_LIVE}, "stage3_prefetch_bucket_size": 40000, '
      f'"reduce_bucket_size": {BUCKET}, "stage3_param_persistence_threshold": 0')
VARIANTS = ["stage3", "stage3-offload", "stage3-offload-param"]


def run(host, mpiexec, variant, layers, np_, zo=ZO, extra_env=None, who="offload3_sweep"):
    """One memory_sweep_host run of `layers` layers on np_ ranks; its JSON
    line.  Also used by offload3_nvme_sweep.py (its own zero_optimization
    keys and NVMe directory)."""
    env = dict(os.environ, ZERO_SWEEP_ZO=zo, **(extra_env or {}))
    cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(np_), "--mca", "btl", "self,vader",
           host, variant, str(layers * (LAYER + BIAS)), "2", str(layers)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    line = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not line:
        sys.exit(f"{who}: {' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(line[-1])


def main():
    host = sys.argv[1]
    mpiexec = sys.argv[2] if len(sys.argv) > 2 else "mpirun"
    sizes = [4, 16, 64]
    fails = []
    bound = 4 * MAX_LIVE + 2 * 4 * max(BUCKET, LAYER) + 4096
    for np_ in (1, 3):
        r = {(v, l): run(host, mpiexec, v, l, np_) for v in VARIANTS for l in sizes}
        print(f"N={np_}: device-tier peak bytes (host-tier peak) by layers {sizes}")
        for v in VARIANTS:
            print(f"  {v:<22}" + "".join(f"{r[v, l]['dev_peak']:>10} ({r[v, l]['host_peak']:>9})" for l in sizes))
        for l in sizes:
            a, b, c = (r[v, l]["dev_peak"] for v in VARIANTS)
            if not c < b < a:
                fails.append(f"N={np_} layers={l}: device peaks stage3 {a}, +offload {b}, +offload_param {c}: "
                             "expected strictly decreasing")
            digests = {r[v, l]["digest"] for v in VARIANTS}
            if len(digests) != 1:
                fails.append(f"N={np_} layers={l}: digests differ {digests}")
        op = [r["stage3-offload-param", l]["dev_peak"] for l in sizes]
        s3 = [r["stage3", l]["dev_peak"] for l in sizes]
        if max(op) > 1.15 * min(op):
            fails.append(f"N={np_}: offload_param device peak varies with the model: {op}")
        if max(op) > bound:
            fails.append(f"N={np_}: offload_param device peak {max(op)} above the window bound {bound}")
        if s3[-1] < 4 * s3[0]:
            fails.append(f"N={np_}: stage3's device peak did not scale with the model ({s3}): the sweep shows nothing")
        hp = [r["stage3-offload-param", l]["host_peak"] for l in sizes]
        if hp[-1] < 4 * hp[0]:
            fails.append(f"N={np_}: offload_param host peak {hp} does not carry the model state")
        print(f"  offload_param device peak {min(op)}..{max(op)} bytes (window bound {bound}); stage3 "
              f"{s3[0]} -> {s3[-1]} ({s3[-1] / s3[0]:.1f}x for a {sizes[-1] // sizes[0]}x deeper model)")
    for f in fails:
        print("FAIL:", f)
    print("offload3_sweep:", "PASS" if not fails else "FAIL")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
