#!/usr/bin/env bash
# ctest stage3_nvme_param_errors (issue 20): offload_param.device "nvme"
# failures are named, never a crash or a silent wrong result:
#   1. an nvme_path that cannot hold files (a missing directory; a regular
#      file) fails engine setup on every rank naming the path and the errno;
#   2. a shard file that lost its second half (test-only hook
#      ZERO_NVME_FAULT=truncate) fails the first gather that reads past it:
#      ZERO_ERR_IO naming the param, the offset and "short read";
#   3. buffer_size below the largest piece and buffer_count 1 are refused by
#      name.
# Usage: check-nvme-param-errors.sh ZERO_DEMO MPIEXEC REPO_ROOT OUT_DIR
set -uo pipefail
DEMO="$1" MPIEXEC="$2" ROOT="$3" OUT="$4"
rm -rf "$OUT"; mkdir -p "$OUT/ok"; touch "$OUT/a-file"
python3 - "$ROOT/examples/configs/stage3.json" "$OUT" <<'PY'
import json, sys
base, out = json.load(open(sys.argv[1])), sys.argv[2]
base.pop("scheduler", None)
def write(name, **op):
    c = json.loads(json.dumps(base))
    c["zero_optimization"].update(offload_optimizer={"device": "cpu"}, sub_group_size=20000,
                                  offload_param=dict({"device": "nvme", "nvme_path": f"{out}/ok"}, **op))
    json.dump(c, open(f"{out}/{name}.json", "w"), indent=1)
write("missing", nvme_path=f"{out}/no/such/dir")
write("notdir", nvme_path=f"{out}/a-file")
write("ok")
write("small", buffer_size=100)
write("count1", buffer_count=1)
PY
fails=0
expect() { # name np config expected-text... (the run must fail and print every text)
  local name="$1" np="$2" cfg="$3"; shift 3
  "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader "$DEMO" ${DEMO_DATA:+--data "$DEMO_DATA"} --config "$OUT/$cfg.json" \
    --steps 2 --quiet >"$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] || { echo "FAIL $name: exit 0, expected a failure"; fails=1; return; }
  for t in "$@"; do
    grep -qF -- "$t" "$OUT/$name.log" || { echo "FAIL $name: no '$t' in:"; tail -5 "$OUT/$name.log"; fails=1; }
  done
  echo "$name: $(grep -m1 -o 'ZERO_ERR_[A-Z_]*: .*' "$OUT/$name.log" | cut -c1-220)"
}
expect missing 2 missing "ZERO_ERR_IO" "offload_param nvme_path '$OUT/no/such/dir'" "No such file or directory"
[ "$(grep -c "offload_param nvme_path" "$OUT/missing.log")" -ge 2 ] || { echo "FAIL missing: not named on both ranks"; fails=1; }
expect notdir 1 notdir "ZERO_ERR_IO" "'$OUT/a-file'" "Not a directory"
ZERO_NVME_FAULT=truncate expect short 1 ok "ZERO_ERR_IO" "reading the shard of param '" "short read"
expect small 1 small "ZERO_ERR_CONFIG" "offload_param.buffer_size: got 100 elements"
expect count1 1 count1 "ZERO_ERR_CONFIG" "offload_param.buffer_count: got 1, expected at least 2"
left=$(find "$OUT/ok" -mindepth 1)
[ -z "$left" ] || { echo "FAIL: files left under $OUT/ok: $left"; fails=1; }
[ $fails -eq 0 ] && echo "stage3 nvme param errors: PASS" || echo "stage3 nvme param errors: FAIL"
exit $fails
