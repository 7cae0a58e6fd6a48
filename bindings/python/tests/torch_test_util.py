"""What every zero.torch test program here starts with (imported by name:
the programs run as scripts, so their folder is on sys.path): torch or a
skip (exit 77, ctest's SKIP_RETURN_CODE), one torch thread per rank (the
ranks share 2 cores), this rank and the world size -- from mpirun, or from
torchrun's RANK / WORLD_SIZE (run_torch_group.py) -- and check(), which
records a failed check in `failures` and says it on stderr without
stopping, so one run reports every failure."""
import os
import sys

try:
    import torch
except ImportError:
    print("torch not importable by %s: skipped" % sys.executable)
    sys.exit(77)

torch.set_num_threads(1)
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", 0)))
WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d FAIL: %s" % (RANK, what), file=sys.stderr)
