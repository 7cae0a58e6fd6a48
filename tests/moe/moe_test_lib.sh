# Shared by the MoE demo checks (sourced): the demo's data and launcher,
# a scratch directory removed at exit ($work) and the fp32 variant of
# examples/configs/moe.json ($work/fp32.json: bf16 and its 16-bit
# gradient accumulation dropped).  Needs $src (the source tree).
data=(${DEMO_DATA:+--data "$DEMO_DATA"})  # ctest: one file of the corpus (tests/CMakeLists.txt)
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader)
work=$(mktemp -d /tmp/zero-moe-check-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$src/examples/configs/moe.json" "$work/fp32.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.pop("bf16", None)
c.pop("data_types", None)
json.dump(c, open(sys.argv[2], "w"))
PY
