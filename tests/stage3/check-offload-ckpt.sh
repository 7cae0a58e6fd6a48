#!/usr/bin/env bash
# ctest stage3_offload_ckpt (issue 20): checkpoints of stage 3 with offload.
#   1. NVMe optimizer tiles + offload_param, N=2: 4 steps straight == 2 steps,
#      save, resume to 4 (bitwise digest);
#   2. that checkpoint resumed at N=3 by stage2 (no offload) and by stage3
#      with offload_optimizer cpu: the same bits both ways (resharding
#      reads the tile file's master and states through the ckpt services);
#   3. offload_param.device "nvme" (the shard in a file): with the NVMe
#      optimizer (params blob written from the file) and with the optimizer in
#      host memory (fp32: no params blob, the shard rewritten from the master
#      on load): 4 steps == 2 + save + resume == case 1's bits; its checkpoint
#      resumed with offload_param cpu, and case 1's checkpoint resharded to
#      N=3 with NVMe params (== stage2's bits); nothing left in the NVMe
#      directories.
# Usage: check-offload-ckpt.sh ZERO_DEMO MPIEXEC REPO_ROOT OUT_DIR
set -euo pipefail
DEMO="$1" MPIEXEC="$2" ROOT="$3" OUT="$4"
rm -rf "$OUT"; mkdir -p "$OUT/nvme" "$OUT/pnvme"
python3 - "$ROOT/examples/configs/stage3.json" "$OUT" <<'PY'
import json, sys
base, out = json.load(open(sys.argv[1])), sys.argv[2]
base.pop("scheduler", None)
def write(name, **zo):
    c = json.loads(json.dumps(base)); c["zero_optimization"].update(zo, sub_group_size=20000)
    json.dump(c, open(f"{out}/{name}.json", "w"), indent=1)
write("nvme", offload_optimizer={"device": "nvme", "nvme_path": f"{out}/nvme"}, offload_param={"device": "cpu"})
write("cpu", offload_optimizer={"device": "cpu"})
pn = {"device": "nvme", "nvme_path": f"{out}/pnvme", "buffer_count": 4}
write("pnvme", offload_optimizer={"device": "nvme", "nvme_path": f"{out}/nvme"}, offload_param=pn)
write("pcpu", offload_optimizer={"device": "cpu"}, offload_param=pn)
write("plain")
PY
run() { # np name config [args]
  local np="$1" name="$2" cfg="$3"; shift 3
  "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader "$DEMO" ${DEMO_DATA:+--data "$DEMO_DATA"} --config "$OUT/$cfg.json" \
    --quiet --summary "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1 || { echo "run $name failed:"; cat "$OUT/$name.log"; exit 1; }
}
run 2 straight nvme --steps 4
run 2 first nvme --steps 2 --save-dir "$OUT/ck"
run 2 resumed nvme --steps 4 --resume "$OUT/ck"
run 3 as-stage2 plain --steps 4 --resume "$OUT/ck" --plugin stage2
run 3 as-cpu cpu --steps 4 --resume "$OUT/ck"
run 2 straight-p pnvme --steps 4
run 2 first-p pnvme --steps 2 --save-dir "$OUT/ck-p"
run 2 resumed-p pnvme --steps 4 --resume "$OUT/ck-p"
run 2 p-as-cpu-params nvme --steps 4 --resume "$OUT/ck-p"
run 2 first-pc pcpu --steps 2 --save-dir "$OUT/ck-pc"
run 2 resumed-pc pcpu --steps 4 --resume "$OUT/ck-pc"
run 3 as-pnvme pnvme --steps 4 --resume "$OUT/ck"
left=$(find "$OUT/nvme" "$OUT/pnvme" -mindepth 1)
[ -z "$left" ] || { echo "files left in the NVMe directories: $left"; exit 1; }
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
names = ("straight", "resumed", "as-stage2", "as-cpu", "straight-p", "resumed-p", "p-as-cpu-params", "resumed-pc",
         "as-pnvme")
b = {n: json.load(open(f"{out}/{n}.json"))["digest"]["bits"] for n in names}
print(b)
ok = len({b[n] for n in ("straight", "resumed", "straight-p", "resumed-p", "p-as-cpu-params", "resumed-pc")}) == 1
ok = ok and b["as-stage2"] == b["as-cpu"] == b["as-pnvme"]
print("stage3 offload checkpoints:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
