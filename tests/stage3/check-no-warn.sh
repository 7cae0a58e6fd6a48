#!/usr/bin/env bash
# Stage 3 with default stage-3 keys logs no WARN line (issue 34 item 7): the
# implicit gather cap is a DEBUG note, eval/generate/gathered_parameters()
# orders are not divergences.
#   check-no-warn.sh demo <zero-demo> <mpirun> <np> <source dir> <out dir>
#     the demo with {"zero_optimization": {"stage": 3}} (every other key its
#     default) and with examples/configs/stage3.json; both evaluate and
#     digest in their own phases
#   check-no-warn.sh torch <python> <mpirun> <np> <source dir> <out dir>
#     bindings/python/examples/train_mlp.py --stage 3, then
#     tests/stage3/no_warn_torch.py (eval, generate, gathered_parameters());
#     exit 77 (skipped) without torch.  ZERO_LIBRARY and PYTHONPATH come
#     from the environment.
# (ZERO_PLUGIN_PATH too, and DEMO_DATA, as ctest sets them.)
set -u
mode=$1 prog=$2 mpirun=$3 np=$4 src=$5 out=$6
mkdir -p "$out"
fail=0
run() { # name, command...: run under mpirun, keep the output, look for WARN
  local name=$1
  shift
  timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader "$@" \
    >"$out/$name.log" 2>&1
  local rc=$?
  if [ "$rc" = 77 ]; then
    echo "SKIP $name: $(tail -1 "$out/$name.log")"
    return 77
  fi
  if [ "$rc" != 0 ]; then
    echo "FAIL $name: exit $rc"
    tail -20 "$out/$name.log"
    fail=1
  elif grep -Eq '\bWARN\b' "$out/$name.log"; then
    echo "FAIL $name: WARN lines:"
    grep -E '\bWARN\b' "$out/$name.log" | sort | uniq -c
    fail=1
  else
    echo "ok   $name (N = $np): no WARN line"
  fi
  return 0
}
case "$mode" in
demo)
  echo '{"zero_optimization": {"stage": 3}}' >"$out/default.json"
  data=(${DEMO_DATA:+--data "$DEMO_DATA"})
  run demo_default_np$np "$prog" "${data[@]}" --config "$out/default.json" --steps 20 --quiet
  run demo_stage3json_np$np "$prog" "${data[@]}" --config "$src/examples/configs/stage3.json" --steps 20 --quiet
  ;;
torch)
  run train_mlp_np$np "$prog" "$src/bindings/python/examples/train_mlp.py" --stage 3 --steps 60 || exit 77
  run no_warn_torch_np$np "$prog" "$src/tests/stage3/no_warn_torch.py" 64
  ;;
*)
  echo "usage: check-no-warn.sh demo|torch ..." >&2
  exit 2
  ;;
esac
exit $fail
