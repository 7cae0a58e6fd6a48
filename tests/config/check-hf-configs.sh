#!/usr/bin/env bash
# ctest config_hf_examples (issue 20): Hugging Face's ZeRO-2 and ZeRO-3
# example configs (examples/configs/hf_zero2.json, hf_zero3.json, written key
# for key from the transformers DeepSpeed docs) create an engine and train
# the demo at N ranks:
#   * hf_zero3 runs plugin stage3 with the optimizer state AND the parameter
#     shard in the host tier (nothing of either in the device tier);
#   * hf_zero2 runs plugin offload (optimizer state in the host tier);
#   * every warning names a config key of the file, no key is "unknown";
#   * the "auto" sizes are resolved from the model (logged);
#   * the same ZeRO-3 config with offload_optimizer on NVMe under a tmpfs
#     directory trains to the same digest as with "cpu" and leaves no file
#     behind (O_DIRECT where the file system takes it -- tmpfs does since
#     Linux 6.6 -- else buffered with a warning; the log says which).
# Usage: check-hf-configs.sh ZERO_DEMO MPIEXEC REPO_ROOT OUT_DIR [NP]
set -euo pipefail
DEMO="$1" MPIEXEC="$2" ROOT="$3" OUT="$4" NP="${5:-2}"
mkdir -p "$OUT"
run() { # name config
  rm -f "$OUT/$1.json"
  ZERO_LOG_LEVEL=info "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$NP" --mca btl self,vader \
    "$DEMO" ${DEMO_DATA:+--data "$DEMO_DATA"} --config "$2" --steps 3 --quiet --summary "$OUT/$1.json" >"$OUT/$1.log" 2>&1 \
    || { echo "check-hf-configs: $1 failed:"; cat "$OUT/$1.log"; exit 1; }
}
run zero3 "$ROOT/examples/configs/hf_zero3.json"
run zero2 "$ROOT/examples/configs/hf_zero2.json"
NV=$(mktemp -d /dev/shm/libzero-hf-nvme.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$NV"' EXIT
python3 - "$ROOT/examples/configs/hf_zero3.json" "$OUT/hf_zero3_nvme.json" "$NV" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": sys.argv[3], "pin_memory": True}
# DeepSpeed's ZeRO-Infinity example: the parameters on NVMe too, with its offload_param keys
c["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": sys.argv[3], "pin_memory": True,
                                           "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9}
c["zero_optimization"]["sub_group_size"] = 20000
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
run zero3-nvme "$OUT/hf_zero3_nvme.json"
python3 - "$OUT" "$ROOT/examples/configs" "$NV" <<'PY'
import json, os, re, sys
out, cfgdir, nv = sys.argv[1:4]
fails = []
def keys_of(obj, prefix=""):
    for k, v in obj.items():
        yield prefix + k
        if isinstance(v, dict):
            yield from keys_of(v, prefix + k + ".")
for name, cfg, plugin in (("zero3", "hf_zero3.json", "stage3"), ("zero2", "hf_zero2.json", "offload"),
                          ("zero3-nvme", None, "stage3")):
    s = json.load(open(os.path.join(out, name + ".json")))
    log = open(os.path.join(out, name + ".log")).read()
    if s["plugin"] != plugin:
        fails.append(f"{name}: plugin {s['plugin']}, expected {plugin}")
    if len(s["losses"]) != 3 or not all(l == l for l in s["losses"]):
        fails.append(f"{name}: did not train 3 steps: {s['losses']}")
    for m in s["memory"]:
        d, h = m["device"]["current"], m["host"]["current"]
        if d["optim"] or d["master"] or h["optim"] <= 0:
            fails.append(f"{name} rank {m['rank']}: optimizer state not in the host tier: {d} / {h}")
        if plugin == "stage3" and (d["params"] or d["grads"] or h["params"] <= 0):
            fails.append(f"{name} rank {m['rank']}: shard/gradients not in the host tier: {d} / {h}")
    if "unknown key" in log:
        fails.append(f"{name}: unknown key warnings:\n" + "\n".join(l for l in log.splitlines() if "unknown key" in l))
    if cfg:
        known = set(keys_of(json.load(open(os.path.join(cfgdir, cfg)))))
        for line in log.splitlines():
            m = re.search(r"WARN: ([A-Za-z0-9_.]+):", line)
            if "WARN:" in line and (not m or m.group(1) not in known):
                fails.append(f"{name}: a warning that names no key of {cfg}: {line}")
    if plugin == "stage3" and 'config "auto" sizes from the model' not in log:
        fails.append(f"{name}: the auto sizes were not resolved from the model")
    print(f"{name}: plugin {s['plugin']}, losses {s['losses']}, digest {s['digest']['bits']}, "
          f"{sum('WARN' in l for l in log.splitlines())} warning line(s)")
a, b = (json.load(open(os.path.join(out, n + ".json")))["digest"]["bits"] for n in ("zero3", "zero3-nvme"))
if a != b:
    fails.append(f"NVMe run digest {b} != cpu offload {a}")
nvlog = open(os.path.join(out, "zero3-nvme.log")).read()
print("zero3-nvme:", "buffered (O_DIRECT refused)" if "refuses O_DIRECT" in nvlog else "O_DIRECT",
      "under", nv)
if "states in an NVMe file under" not in nvlog or "parameter shard in an NVMe file under" not in nvlog:
    fails.append("zero3-nvme: the NVMe files (optimizer tiles, parameter shard) were not used")
if os.listdir(nv):
    fails.append(f"the NVMe tile files were left behind in {nv}: {os.listdir(nv)}")
for f in fails:
    print("FAIL:", f)
print("check-hf-configs:", "PASS" if not fails else "FAIL")
sys.exit(1 if fails else 0)
PY
