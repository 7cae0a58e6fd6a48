#!/usr/bin/env bash
# Step time of stage3 vs zeropp vs mics across two simulated hosts (issue 21).
#
# Two network namespaces are the two "hosts", joined by a veth pair that
# `tc` limits to RATE (default 1gbit) each way; two MPI ranks on each.
# mpirun runs in host A and starts host B's daemon through a stand-in for
# ssh that enters namespace B (ssh_ns.sh), so every inter-host byte crosses
# the limited link over TCP (btl self,tcp: no shared memory between the
# hosts, which would bypass the link).  ZERO_RANKS_PER_NODE=2 tells libzero
# where the node boundary is (both namespaces share one kernel, so
# libzero's own node records see one machine), and ZERO_COMM_SHM=0 keeps
# libzero's shared-memory collectives (docs/comm.md, issue 18) from
# bypassing the link the same way; SHM=1 in the environment turns them on
# (correct since 1.7.1, but then the world's collectives skip the link).
#
# Configs: examples/configs/stage3.json as is (stage3), with qwZ + qgZ + hpZ
# over the node pair (zeropp), and with mics_shard_size 2 (mics: one shard
# group per host).  Each runs REPEATS times, interleaved; the table gives
# the median of the demo's mean step time and the ratio to stage3's median
# measured in the same run.  The machine is shared: read ratios, not
# absolute times.  Skips (exit 0, says why) where namespaces, veth or tc
# are not permitted.  Cleans up its namespaces on exit.
#
# The model (issue 33: one where bytes count): HOST=peers (the default
# where bench_peers_host was built, i.e. with OpenBLAS) trains bench/peers'
# C host, LAYERS x Linear(WIDTH) (default 20 x 1024^2 + bias = 21.0 M fp32
# parameters), per-layer zero_gather/zero_release, one BLAS thread per
# rank, gradient accumulation 1, DeepSpeed's default stage 3 keys plus the
# strategy's own; it reports the slowest rank's median step after one
# warm-up step, and rank 0 (in host A) reads host A's veth counters
# (PEERS_LINK_IF) at the warm-up and at the end: the bytes that crossed
# the link per step, both ways, MPI's TCP framing included.  HOST=demo is
# the demo's 0.19 M-parameter model as before (no link counter).
#
# Usage: bench/contrib_netns/run.sh [build dir] [contrib plugin dir] [steps] [repeats] [rate]
#   contrib plugin dir: where libzero-plugin-{zeropp,mics}.so are
#   (default: <build>/tests/contrib/work/build, made by `ctest -R contrib.build`)
# SUITE=onebit (environment) compares stage0 (AdamW, bias_correction false)
# with 1-bit Adam (plugins-contrib/onebit, freeze_step 0: every step
# compressed) instead, on the demo's stage0 settings with stage3.json's
# optimizer and schedule; the default suite is the one above, unchanged.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
pdir=${2:-$build/tests/contrib/work/build}
steps=${3:-10}
reps=${4:-3}
rate=${5:-1gbit}
demo=$build/examples/demo/zero-demo
peers=$build/bench/peers/bench_peers_host
suite=${SUITE:-zero}
if [[ -z ${HOST:-} ]]; then HOST=demo; [[ $suite == zero && -x $peers ]] && HOST=peers; fi
LAYERS=${LAYERS:-20} WIDTH=${WIDTH:-1024}
case $suite in
  zero) cfgs="stage3 zeropp mics" ;;
  onebit) cfgs="stage0 onebit" ;;
  *) echo "contrib-netns: SUITE=$suite: expected zero or onebit" >&2; exit 1 ;;
esac
skip() { echo "contrib-netns: SKIPPED: $*"; exit 0; }
die() { echo "contrib-netns: $*" >&2; exit 1; }
[[ -x $demo ]] || die "no $demo (build first)"
for c in $cfgs; do
  [[ $c == stage* || -f $pdir/libzero-plugin-$c.so ]] ||
    die "no libzero-plugin-$c.so in $pdir (run: cd $build && ctest -R contrib.build)"
done
[[ $(id -u) == 0 ]] || skip "needs root for ip netns / tc"
command -v ip >/dev/null && command -v tc >/dev/null || skip "ip or tc missing (iproute2)"

tag=zn$$
A=${tag}a B=${tag}b
work=$(mktemp -d /tmp/contrib-netns.XXXXXX)
cleanup() {
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$A" 2>/dev/null || skip "network namespaces are not permitted here"
ip netns add "$B" || skip "second namespace refused"
ip link add "${tag}x" type veth peer name "${tag}y" 2>/dev/null || skip "veth pairs are not permitted here"
ip link set "${tag}x" netns "$A" && ip link set "${tag}y" netns "$B" || skip "cannot move veth into namespaces"
ip -n "$A" addr add 10.21.0.1/24 dev "${tag}x"
ip -n "$B" addr add 10.21.0.2/24 dev "${tag}y"
for n in "$A" "$B"; do ip -n "$n" link set lo up; done
ip -n "$A" link set "${tag}x" up
ip -n "$B" link set "${tag}y" up
tc -n "$A" qdisc add dev "${tag}x" root tbf rate "$rate" burst 256kb latency 50ms 2>/dev/null &&
  tc -n "$B" qdisc add dev "${tag}y" root tbf rate "$rate" burst 256kb latency 50ms 2>/dev/null ||
  skip "tc cannot shape the veth link here"

# ssh stand-in: "<agent> <host> <command...>" runs the command in namespace B
cat >"$work/ssh_ns.sh" <<SSH
#!/bin/sh
shift
exec ip netns exec $B /bin/sh -c "\$*"
SSH
chmod +x "$work/ssh_ns.sh"
printf '10.21.0.1 slots=2\n10.21.0.2 slots=2\n' >"$work/hosts"

python3 - "$root/examples/configs/stage3.json" "$work" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
def put(name, **kw):
    c = json.loads(json.dumps(base)); c["zero_optimization"].update(kw)
    json.dump(c, open(f"{sys.argv[2]}/{name}.json", "w"), indent=1)
put("stage3")
put("zeropp", zero_quantized_weights=True, zero_quantized_gradients=True, zero_hpz_partition_size=2)
put("mics", mics_shard_size=2)
# SUITE=onebit: stage 0 (buckets as the demo's stage0 config), AdamW without bias correction (what
# OnebitAdam's update is) vs OneBitAdam compressed from the first step
s0 = {"stage": 0, "reduce_bucket_size": 50000, "overlap_comm": True, "contiguous_gradients": True}
for name, opt in (("stage0", dict(type="AdamW", params=dict(base["optimizer"]["params"], bias_correction=False))),
                  ("onebit", dict(type="OneBitAdam", params=dict(base["optimizer"]["params"], freeze_step=0)))):
    c = json.loads(json.dumps(base)); c["zero_optimization"] = dict(s0); c["optimizer"] = opt
    json.dump(c, open(f"{sys.argv[2]}/{name}.json", "w"), indent=1)
PY

# the peers host's strategy keys per config (added to its zero_optimization)
peers_zo() {
  case $1 in
    zeropp) echo '"zero_quantized_weights": true, "zero_quantized_gradients": true, "zero_hpz_partition_size": 2' ;;
    mics) echo '"mics_shard_size": 2' ;;
    *) echo '' ;;
  esac
}
if [[ $HOST == peers ]]; then
  OPENBLAS_NUM_THREADS=1 "$peers" --write-data "$work/peers.bin" --width "$WIDTH" --layers "$LAYERS" --mb 16 ||
    die "bench_peers_host --write-data failed"
fi

run_one() { # config rep
  local cfg=$1 r=$2 plugin=$1
  if [[ $HOST == peers ]]; then
    timeout 900 ip netns exec "$A" mpirun --allow-run-as-root --oversubscribe -np 4 --hostfile "$work/hosts" \
      --mca plm_rsh_agent "$work/ssh_ns.sh" --mca btl self,tcp --mca btl_tcp_if_include 10.21.0.0/24 \
      --mca oob_tcp_if_include 10.21.0.0/24 \
      -x ZERO_PLUGIN_PATH="$pdir:$build/plugins" -x ZERO_RANKS_PER_NODE=2 -x ZERO_COMM_SHM="${SHM:-0}" \
      -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1 -x PEERS_LINK_IF="${tag}x" -x ZERO_LOG_LEVEL=info \
      "$peers" --data "$work/peers.bin" --stage 3 --plugin "$plugin" --zo "$(peers_zo "$cfg")" --mb 16 \
      --steps $((steps + 1)) --warmup 1 --label "$cfg" >"$work/$cfg.$r.log" 2>&1 || return 1
    grep '^{' "$work/$cfg.$r.log" >"$work/$cfg.$r.json"
    return
  fi
  timeout 300 ip netns exec "$A" mpirun --allow-run-as-root --oversubscribe -np 4 --hostfile "$work/hosts" \
    --mca plm_rsh_agent "$work/ssh_ns.sh" --mca btl self,tcp --mca btl_tcp_if_include 10.21.0.0/24 \
    --mca oob_tcp_if_include 10.21.0.0/24 \
    -x ZERO_PLUGIN_PATH="$pdir:$build/plugins" -x ZERO_RANKS_PER_NODE=2 -x ZERO_COMM_SHM="${SHM:-0}" \
    "$demo" --config "$work/$cfg.json" --plugin "$plugin" --steps "$steps" --quiet \
    --summary "$work/$cfg.$r.json" >"$work/$cfg.$r.log" 2>&1
}

echo "contrib-netns: 2 hosts (namespaces) x 2 ranks, link $rate (tc tbf), $steps steps x $reps repeats, suite $suite ($cfgs)," \
     "model: $([[ $HOST == peers ]] && echo "$LAYERS x Linear($WIDTH) C host" || echo "the demo's")"
for r in $(seq 1 "$reps"); do
  for cfg in $cfgs; do
    if ! run_one "$cfg" "$r"; then
      tail -20 "$work/$cfg.$r.log"
      die "run $cfg #$r failed"
    fi
  done
done
if [[ $HOST == peers ]]; then
  python3 - "$work" "$reps" $cfgs <<'PY'
import json, re, statistics as S, sys
work, reps, cfgs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {c: [json.load(open(f"{work}/{c}.{r}.json")) for r in range(1, reps + 1)] for c in cfgs}
base = cfgs[0]
med = {c: S.median(x["step_ms"] for x in rows[c]) for c in cfgs}
link = {c: S.median(x["link_bytes_per_step"] for x in rows[c]) for c in cfgs}
print(f"  model: {rows[base][0]['params'] / 1e6:.1f} M params; per step: slowest rank's median step after one"
      " warm-up step; link bytes = host A's veth, both ways")
for c in cfgs:
    print(f"  {c:<7} step {med[c]:9.1f} ms (runs: {', '.join('%.1f' % x['step_ms'] for x in rows[c])})  "
          f"link {link[c] / 2**20:8.2f} MiB/step  rank-0 libzero bytes/step {rows[c][0]['comm_bytes_per_step'][0] / 2**20:.2f} MiB"
          f"  final loss {rows[c][0]['final_loss']:.5f}")
for c in cfgs[1:]:
    print(f"  {c} / {base}: step time {med[c] / med[base]:.2f}x, link bytes {link[c] / link[base]:.3f}x")
for c in cfgs:  # the strategies' own counters (rank 0's INFO lines at destroy)
    for l in open(f"{work}/{c}.1.log"):
        if re.search(r"param gathers|node|cross", l) and "INFO" in l and "rank 0]" in l:
            print(f"    [{c}] {l.strip()[:220]}")
PY
  exit 0
fi
python3 - "$work" "$reps" $cfgs <<'PY'
import json, statistics, sys
work, reps, cfgs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
base = cfgs[0]
med = {}
for cfg in cfgs:
    t = [json.load(open(f"{work}/{cfg}.{r}.json"))["mean_step_time_ms"] for r in range(1, reps + 1)]
    s = json.load(open(f"{work}/{cfg}.1.json"))
    med[cfg] = statistics.median(t)
    print(f"  {cfg:<7} median step {med[cfg]:8.1f} ms  (runs: {', '.join('%.1f' % x for x in t)})  "
          f"rank-0 bytes gathered {s['comm']['bytes_gathered']}, reduced {s['comm']['bytes_reduced']}")
B = lambda s: s["comm"]["bytes_gathered"] + s["comm"]["bytes_reduced"]
for cfg in cfgs[1:]:
    print(f"  {cfg} / {base} step time: {med[cfg] / med[base]:.2f}")
    if base == "stage0":  # SUITE=onebit: the goal is <= 0.1x stage0's bytes
        ratio = B(json.load(open(f"{work}/{cfg}.1.json"))) / B(json.load(open(f"{work}/{base}.1.json")))
        print(f"  {cfg} / {base} rank-0 bytes: {ratio:.4f}")
PY
