#!/bin/sh
# gpu_ranks.sh MPIEXEC PROGRAM [ARGS...]: run PROGRAM with one MPI rank per
# GPU present (nvidia-smi -L), or exit 77 (ctest: Skipped) without a GPU.
mpiexec=$1
shift
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${n:-0}" -eq 0 ]; then
    echo "SKIPPED: no GPU listed by nvidia-smi ($(nvidia-smi -L 2>&1 | head -n 1))"
    exit 77
fi
exec "$mpiexec" --allow-run-as-root --oversubscribe -np "$n" --mca btl self,vader "$@"
