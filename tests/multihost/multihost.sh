#!/usr/bin/env bash
# Two test hosts as network namespaces joined by a veth pair; mpirun started
# in the first, the remote ranks through rsh-agent.sh (`ip netns exec`);
# Open MPI over TCP on the veth addresses only (btl tcp,self; the daemons'
# out-of-band channel too).
#
#   multihost.sh plugins   BUILD_DIR WORK_DIR
#       zero-demo with every plugin, 4 ranks (2 per host): every final
#       parameter digest (digest.bits) equals stage0's.
#   multihost.sh link-down BUILD_DIR WORK_DIR
#       multihost_link_host trains with stage2, then stage3; once all ranks
#       run, the veth link is taken down and left down: every rank must end
#       with a named error (ZERO_ERR_*) within ZERO_COMM_TIMEOUT=5 s (and
#       ZERO_STAGE3_TIMEOUT_S=5) plus LINK_MARGIN_S (default 10) seconds
#       (LINK_PLUGINS: the plugins tried, default "stage2 stage3").
#
# Namespaces and links are named per run (zmh<pid>a/b) and removed on every
# exit (trap), with any process still inside them.  Exit 77 (ctest: skipped)
# when not root, without iproute2, or where network namespaces are refused.
set -uo pipefail
mode=$1 build=$2 work=$3
src=$(cd "$(dirname "$0")" && pwd)
id=$$
nsa=zmh${id}a nsb=zmh${id}b
net=10.217.$((id % 250)).
ipa=${net}1 ipb=${net}2

skip() {
    echo "multihost: SKIPPED: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null || skip "iproute2 (ip) not installed"

cleanup() {
    for ns in $nsa $nsb; do
        if ip netns list 2>/dev/null | grep -qw "$ns"; then
            # processes this run started inside its own namespaces
            for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
            ip netns del "$ns" 2>/dev/null
        fi
    done
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add $nsa 2>/dev/null || skip "ip netns add refused (no network namespaces here)"
ip netns add $nsb || skip "ip netns add refused"
ip link add ${nsa} type veth peer name ${nsb} || skip "cannot create a veth pair"
ip link set ${nsa} netns $nsa && ip link set ${nsb} netns $nsb || exit 1
ip -n $nsa addr add ${ipa}/24 dev ${nsa} && ip -n $nsb addr add ${ipb}/24 dev ${nsb} || exit 1
for ns in $nsa $nsb; do
    ip -n $ns link set lo up && ip -n $ns link set $ns up || exit 1
done
# reachability without ping (not always installed): a refused TCP connection answers
reachable=0
for _ in $(seq 1 50); do
    answer=$(ip netns exec $nsa timeout 2 bash -c "echo >/dev/tcp/$ipb/9" 2>&1)
    if [[ $answer == *refused* ]]; then
        reachable=1
        break
    fi
    sleep 0.1
done
[ $reachable = 1 ] || { echo "multihost: $ipa cannot reach $ipb"; exit 1; }

rm -rf "$work"
mkdir -p "$work"
printf '%s slots=2\n%s slots=2\n' $ipa $ipb >"$work/hostfile"
export MULTIHOST_MAP="$ipa=$nsa $ipb=$nsb"
export ZERO_PLUGIN_PATH=$build/plugins
mpi=(mpirun --allow-run-as-root -np 4 --hostfile "$work/hostfile" --mca plm_rsh_agent "$src/rsh-agent.sh"
    --mca btl tcp,self --mca btl_tcp_if_include ${net}0/24 --mca oob_tcp_if_include ${net}0/24
    --mca orte_abort_on_non_zero_status 0 -x ZERO_PLUGIN_PATH -x PATH)
[ -n "${LD_LIBRARY_PATH:-}" ] && mpi+=(-x LD_LIBRARY_PATH)
in_a() { ip netns exec $nsa "$@"; }

if [ "$mode" = plugins ]; then
    status=0
    for p in stage0 stage1 stage2 stage3 offload stage1-pp; do
        t0=$(date +%s.%N)
        # a small corpus (one 11 KB text): seconds per run, not the default's 237 KB
        in_a timeout 120 "${mpi[@]}" "$build/examples/demo/zero-demo" --plugin $p --steps 3 --quiet \
            --data /usr/share/common-licenses/Apache-2.0 \
            --summary "$work/$p.json" >"$work/$p.log" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        if [ $rc != 0 ] || [ ! -s "$work/$p.json" ]; then
            tail -30 "$work/$p.log"
            echo "multihost: $p across two hosts failed (exit $rc)"
            status=1
            continue
        fi
        bits=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"]["bits"])' "$work/$p.json")
        hosts=$(grep -c "" "$work/hostfile")
        printf 'multihost: %-9s 4 ranks on %d hosts: digest %s (%.1f s)\n' $p "$hosts" "$bits" \
            "$(awk -v a=$t0 -v b=$t1 'BEGIN { print b - a }')"
        [ $p = stage0 ] && ref=$bits
        if [ "$bits" != "${ref:-}" ]; then
            echo "multihost: $p digest $bits differs from stage0's ${ref:-?}"
            status=1
        fi
    done
    # the ranks really ran on both hosts: the remote daemon's hostname is its namespace
    [ $status = 0 ] && echo "multihost: every plugin equals stage0 bitwise across the two hosts"
    exit $status
fi

[ "$mode" = link-down ] || { echo "usage: $0 plugins|link-down BUILD_DIR WORK_DIR" >&2; exit 2; }
timeout_s=5
margin=${LINK_MARGIN_S:-10}
export ZERO_COMM_TIMEOUT=$timeout_s ZERO_STAGE3_TIMEOUT_S=$timeout_s
status=0
for p in ${LINK_PLUGINS:-stage2 stage3}; do
    out=$work/$p
    mkdir -p "$out"
    # the link comes back up between cases (a fresh one each time)
    in_a ip link set $nsa up
    ip -n $nsb link set $nsb up
    in_a "${mpi[@]}" -x ZERO_COMM_TIMEOUT -x ZERO_STAGE3_TIMEOUT_S \
        "$build/tests/multihost/multihost_link_host" $p 1000000 "$out" >"$out/mpirun.log" 2>&1 &
    mpirun_pid=$!
    # wait until all four ranks train (3 steps done), then one more second of steps
    for _ in $(seq 1 600); do
        n=$(cat "$out"/rank*.log 2>/dev/null | grep -c "stepping")
        [ "$n" = 4 ] && break
        sleep 0.1
    done
    if [ "$n" != 4 ]; then
        cat "$out/mpirun.log"
        echo "multihost: $p: only $n of 4 ranks started training"
        status=1
        kill $mpirun_pid 2>/dev/null
        continue
    fi
    sleep 1
    in_a ip link set $nsa down
    down=$(date +%s.%N)
    deadline=$((timeout_s + margin))
    ended=0
    while :; do
        ended=$(cat "$out"/rank*.log | grep -c "ended after\|finished")
        took=$(awk -v a=$down -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        [ "$ended" = 4 ] && break
        awk -v t=$took -v d=$deadline 'BEGIN { exit !(t >= d) }' && break
        sleep 0.1
    done
    for r in 0 1 2 3; do
        line=$(grep -m1 "ended after\|finished" "$out/rank$r.log" || true)
        case "$line" in
        *ZERO_ERR_*)
            at=$(sed -E 's/.* at ([0-9.]+): .*/\1/' <<<"$line")
            after=$(awk -v a=$down -v b=$at 'BEGIN { printf "%.1f", b - a }')
            echo "multihost: $p rank $r: named error ${after} s after the link went down: $line"
            if awk -v t=$after -v d=$deadline 'BEGIN { exit !(t > d) }'; then
                echo "multihost: $p rank $r: later than ${deadline} s"
                status=1
            fi ;;
        "") echo "multihost: $p rank $r: no named error ${deadline} s after the link went down (still waiting)"
            status=1 ;;
        *) echo "multihost: $p rank $r: unexpected: $line"
           status=1 ;;
        esac
    done
    echo "multihost: $p: $ended of 4 ranks ended within ${took} s of the link going down (limit ${deadline} s)"
    # bring the link back so that mpirun can collect its daemons; then stop it
    in_a ip link set $nsa up
    ip -n $nsb link set $nsb up
    for _ in $(seq 1 50); do kill -0 $mpirun_pid 2>/dev/null || break; sleep 0.1; done
    kill $mpirun_pid 2>/dev/null
    wait $mpirun_pid 2>/dev/null
    for ns in $nsa $nsb; do
        for pid in $(ip netns pids $ns); do kill -9 $pid 2>/dev/null; done
    done
done
[ $status = 0 ] && echo "multihost: every rank ended in a named error within the timeout, both plugins"
exit $status
