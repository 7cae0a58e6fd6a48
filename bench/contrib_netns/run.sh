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
# MPI_Comm_split_type(SHARED) would see one node), and ZERO_COMM_SHM=0 keeps
# libzero's own shared-memory collectives (docs/comm.md, issue 18) from
# bypassing the link the same way (with them on, mics also hung in its
# first gather here, before and after the gather engine: not investigated).
#
# Configs: examples/configs/stage3.json as is (stage3), with qwZ + qgZ + hpZ
# over the node pair (zeropp), and with mics_shard_size 2 (mics: one shard
# group per host).  Each runs REPEATS times, interleaved; the table gives
# the median of the demo's mean step time and the ratio to stage3's median
# measured in the same run.  The machine is shared: read ratios, not
# absolute times.  Skips (exit 0, says why) where namespaces, veth or tc
# are not permitted.  Cleans up its namespaces on exit.
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
suite=${SUITE:-zero}
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

run_one() { # config rep
  local cfg=$1 r=$2 plugin=$1
  timeout 300 ip netns exec "$A" mpirun --allow-run-as-root --oversubscribe -np 4 --hostfile "$work/hosts" \
    --mca plm_rsh_agent "$work/ssh_ns.sh" --mca btl self,tcp --mca btl_tcp_if_include 10.21.0.0/24 \
    --mca oob_tcp_if_include 10.21.0.0/24 \
    -x ZERO_PLUGIN_PATH="$pdir:$build/plugins" -x ZERO_RANKS_PER_NODE=2 -x ZERO_COMM_SHM=0 \
    "$demo" --config "$work/$cfg.json" --plugin "$plugin" --steps "$steps" --quiet \
    --summary "$work/$cfg.$r.json" >"$work/$cfg.$r.log" 2>&1
}

echo "contrib-netns: 2 hosts (namespaces) x 2 ranks, link $rate (tc tbf), $steps steps x $reps repeats, suite $suite ($cfgs)"
for r in $(seq 1 "$reps"); do
  for cfg in $cfgs; do
    if ! run_one "$cfg" "$r"; then
      tail -20 "$work/$cfg.$r.log"
      die "run $cfg #$r failed"
    fi
  done
done
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
