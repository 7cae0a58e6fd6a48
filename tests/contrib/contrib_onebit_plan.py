#!/usr/bin/env python3
"""The onebit plugin's plan (the table's `plan` entry, zero_plan /
zero-estimate) against what it allocates, as tests/plan does for the
built-in plugins: zero-demo under mpirun at N = 4 and N = 3 (fp32) and N = 3
(bf16: fp32 master and per-param gradient temporaries), 6 steps with
freeze_step 2 (warm-up buckets and the compressed phase both used), a
checkpoint at the end whose manifest describes the model to zero-estimate.
Rank 0's measured peak bytes (the demo's summary, zero_memory_stats) per
tier and category must equal the plan's to within 1%, except `other`,
where the plan must be at least the peak (it includes the comm layer's
ring scratch, which is allocated only when a collective needs it).  The
error-feedback buffers and the sign/scale messages are the host tier's
`optim` and part of its `other`.
Usage: contrib_onebit_plan.py --demo PATH --estimate PATH --mpirun PATH --plugin-dir DIR --out DIR
Standard library only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contrib_onebit as ob  # noqa: E402

TAGS = ("params", "grads", "master", "optim", "buckets", "gather", "other")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo", required=True)
    p.add_argument("--estimate", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--data", default="")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fails = []
    for n, extra in ((4, {}), (3, {}), (3, {"bf16": {"enabled": True}})):
        tag = f"plan-n{n}" + ("-bf16" if extra else "")
        ck = os.path.join(a.out, tag + ".ckpt")
        shutil.rmtree(ck, ignore_errors=True)
        cfg = ob.onebit_cfg(2, **extra)
        s = ob.run(a, tag, cfg, n, 6, extra=["--save-dir", ck, "--save-every", "6"])
        meas = s["memory"][0]
        env = dict(os.environ, ZERO_PLUGIN_PATH=a.plugin_dir)
        out = subprocess.run([a.estimate, "--manifest", os.path.join(ck, "step-6", "manifest.json"), "--ranks",
                              str(n), "--plugins", "onebit", "--config", os.path.join(a.out, tag + ".json"),
                              "--json"], env=env, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            fails.append(f"{tag}: zero-estimate failed: {out.stdout[-500:]} {out.stderr[-500:]}")
            continue
        plan = json.loads(out.stdout)["libzero_plan"]["onebit"][0]
        for tier in ("device", "host"):
            got = meas[tier]["peak"]
            row = []
            for t in TAGS:
                m, q = got[t], plan[tier][t]
                ok = q >= m if t == "other" else abs(q - m) <= 0.01 * max(m, 1)
                row.append(f"{t} {m}/{q}{'' if ok else ' MISMATCH'}")
                if not ok:
                    fails.append(f"{tag} {tier} {t}: measured peak {m}, plan {q}")
            print(f"  {tag} {tier} (measured/plan): {', '.join(row)}")
    for f in fails:
        print("FAIL:", f)
    print("contrib-onebit-plan:", "PASS" if not fails else f"FAIL ({len(fails)})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
