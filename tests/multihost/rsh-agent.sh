#!/bin/sh
# Open MPI's rsh agent for the network-namespace "hosts" of multihost.sh:
# mpirun calls it as `rsh-agent.sh [options] HOST COMMAND...` to start its
# daemon on HOST; the command runs in HOST's namespace instead of over ssh.
# MULTIHOST_MAP (set by multihost.sh) maps addresses to namespaces:
# "10.217.3.1=zmh-123-a 10.217.3.2=zmh-123-b".  Each host also gets its own
# UTS namespace (hostname "<namespace>"), as a real second machine would.
while [ $# -gt 0 ]; do
    case "$1" in
    -*) shift ;;
    *) break ;;
    esac
done
host=$1
shift
ns=""
for pair in $MULTIHOST_MAP; do
    [ "${pair%%=*}" = "$host" ] && ns=${pair#*=}
done
if [ -z "$ns" ]; then
    echo "rsh-agent: unknown host $host (map: $MULTIHOST_MAP)" >&2
    exit 1
fi
if command -v unshare >/dev/null 2>&1; then
    exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $ns; $*"
fi
exec ip netns exec "$ns" /bin/sh -c "$*"
