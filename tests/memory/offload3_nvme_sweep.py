#!/usr/bin/env python3
"""Issue 20: offload_param.device "nvme" keeps the host tier at a window.

memory_sweep_host trains LAYERS x (20,000-element weight + 64-element bias)
with the optimizer on NVMe in both variants and the parameter shard either
in host memory (stage3-nvme: offload_param cpu) or in a file too
(stage3-nvme-param: offload_param nvme, buffer_count 3), sub_group_size
10,000, for LAYERS = 16, 64 (and 256 at N=3), at N = 1 and 3.  Checks, on
the accountant's host-tier peaks (maximum over ranks):

  1. the host-tier peak with NVMe params is below the cpu-params one at
     every size;
  2. with NVMe params the host tier's parameter bytes (ZERO_MEM_PARAMS: the
     window and the step's two tiles of new weights) are the same at every
     size and within the window's bound (3 pieces + 2 tiles, aligned), while
     the cpu-params shard grows with the model (>= 3.5x from 16 to 64
     layers);
  3. so is everything in the host tier but the gradient partition (the one
     host array that still scales with the model: docs/memory.md);
  4. both variants train to the same digest, and the NVMe directory is
     empty afterwards (the files are unlinked when created).
Usage: offload3_nvme_sweep.py MEMORY_SWEEP_HOST [MPIEXEC]
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offload3_sweep  # noqa: E402  (its run(): one memory_sweep_host run)

LAYER, BIAS, TILE, ALIGN = 20000, 64, 10000, 4096
ZO = (', "stage3_max_live_parameters": 60000, "stage3_prefetch_bucket_size": 40000, '
      f'"reduce_bucket_size": 40000, "stage3_param_persistence_threshold": 0, "sub_group_size": {TILE}')
VARIANTS = ["stage3-nvme", "stage3-nvme-param"]


def run(host, mpiexec, variant, layers, np_, nvme):
    return offload3_sweep.run(host, mpiexec, variant, layers, np_, zo=ZO, extra_env={"ZERO_SWEEP_NVME": nvme},
                              who="offload3_nvme_sweep")


def up(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


def main():
    host = sys.argv[1]
    mpiexec = sys.argv[2] if len(sys.argv) > 2 else "mpirun"
    fails = []
    # 3 slots of the largest piece + 2 staging tiles, each aligned with 2 blocks of slack
    window = 3 * (up(4 * LAYER) + 2 * ALIGN) + 2 * (up(4 * TILE) + 2 * ALIGN)
    with tempfile.TemporaryDirectory(prefix="zero-nvme-sweep-") as nvme:
        for np_, sizes in ((1, [16, 64]), (3, [16, 64, 256])):
            r = {(v, l): run(host, mpiexec, v, l, np_, nvme) for v in VARIANTS for l in sizes}
            print(f"N={np_}: host-tier peak bytes (params / all but grads) by layers {sizes}")
            for v in VARIANTS:
                print(f"  {v:<18}" + "".join(
                    f"{r[v, l]['host_peak']:>10} ({r[v, l]['host_params_peak']:>8} / "
                    f"{r[v, l]['host_peak'] - r[v, l]['host_grads_peak']:>8})" for l in sizes))
            cpu, nv = VARIANTS
            for l in sizes:
                if not r[nv, l]["host_peak"] < r[cpu, l]["host_peak"]:
                    fails.append(f"N={np_} layers={l}: host peak with nvme params {r[nv, l]['host_peak']} not below "
                                 f"cpu params {r[cpu, l]['host_peak']}")
                if r[nv, l]["digest"] != r[cpu, l]["digest"]:
                    fails.append(f"N={np_} layers={l}: digests differ: {r[cpu, l]['digest']} vs {r[nv, l]['digest']}")
                if r[nv, l]["host_params_peak"] > window:
                    fails.append(f"N={np_} layers={l}: nvme params host PARAMS peak {r[nv, l]['host_params_peak']} "
                                 f"above the window bound {window}")
            pp = [r[nv, l]["host_params_peak"] for l in sizes]
            rest = [r[nv, l]["host_peak"] - r[nv, l]["host_grads_peak"] for l in sizes]
            if max(pp) != min(pp) or max(rest) > 1.01 * min(rest):
                fails.append(f"N={np_}: nvme params host tier grows with the model: params {pp}, all but grads {rest}")
            cp = [r[cpu, l]["host_params_peak"] for l in sizes]
            if cp[1] < 3.5 * cp[0]:
                fails.append(f"N={np_}: cpu params shard did not grow with the model: {cp}")
        left = os.listdir(nvme)
        if left:
            fails.append(f"files left under the NVMe directory: {left}")
    for f in fails:
        print("FAIL:", f)
    if fails:
        sys.exit(1)
    print("offload3_nvme_sweep: OK")


if __name__ == "__main__":
    main()
