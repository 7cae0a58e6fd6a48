"""A torch.distributed process group as libzero's communicator (ABI 1.5,
ZERO_COMM_HOST): the zero_host_comm callbacks of abi/zero.h implemented with
torch.distributed collectives through ctypes, so a job started by torchrun
(or any torch.distributed launch) trains without mpirun.

libzero calls the callbacks only from the thread that is inside a libzero
call (zero_on_grad_ready from autograd's hooks, zero_step, zero_gather, ...),
one at a time, in the same order on every rank, and always with host memory
(on a CUDA engine libzero stages device buffers through host memory):
  * gloo: the host buffers are wrapped as CPU tensors (no copy);
  * nccl: each buffer is copied to the current CUDA device, reduced there
    and copied back (NCCL takes CUDA tensors only).
Each callback is a Python function: expect a few tens of microseconds of
overhead per collective on top of the transport (docs/bindings.md).
Gradient reductions use the started all-to-all (alltoall_start/finish/test,
torch's async_op=True): libzero starts each bucket's exchange in the
gradient hook and finishes it at the step, so backward goes on while the
process group moves the bytes.

The object owns the ctypes struct and the CFUNCTYPE callbacks; keep it
alive as long as the engine (zero.Engine holds it).  Exceptions never cross
into C: a failing collective returns ZERO_ERR_COMM to libzero, and the
exception's text is kept in `last_error` (zero.Engine appends it to the
ZeroError it raises)."""
import ctypes

from . import _lib as L

ZERO_OK, ZERO_ERR_COMM, ZERO_ERR_UNSUPPORTED = 0, 8, 11
DTYPE_F64, DTYPE_I64, DTYPE_U64, DTYPE_U8 = 16, 17, 18, 19

_c_st = ctypes.c_int32
ALLREDUCE_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32)
ALLGATHER_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
BROADCAST_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
BARRIER_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p)
ALLTOALL_FN = ALLGATHER_FN


class HostCommC(ctypes.Structure):
    pass


SPLIT_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                            ctypes.POINTER(ctypes.POINTER(HostCommC)))
RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(HostCommC))
START_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.POINTER(ctypes.c_void_p))
FINISH_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p, ctypes.c_void_p)
TEST_FN = ctypes.CFUNCTYPE(_c_st, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
HostCommC._fields_ = [("struct_size", ctypes.c_uint32), ("reserved0", ctypes.c_uint32), ("rank", ctypes.c_int32),
                      ("size", ctypes.c_int32), ("user", ctypes.c_void_p), ("name", ctypes.c_char_p),
                      ("allreduce_sum", ALLREDUCE_FN), ("allgather", ALLGATHER_FN), ("broadcast", BROADCAST_FN),
                      ("barrier", BARRIER_FN), ("alltoall", ALLTOALL_FN), ("split", SPLIT_FN),
                      ("release", RELEASE_FN), ("alltoall_start", START_FN), ("alltoall_finish", FINISH_FN),
                      ("alltoall_test", TEST_FN)]


def group_ranks(group):
    """Global ranks of a torch.distributed group, in group-rank order."""
    import torch.distributed as dist
    if group is None or group is dist.group.WORLD:
        return list(range(dist.get_world_size()))
    if hasattr(dist, "get_process_group_ranks"):
        return list(dist.get_process_group_ranks(group))
    from torch.distributed import distributed_c10d as c10d  # torch < 2.0
    m = c10d._pg_group_ranks[group]
    return [g for g, _ in sorted(m.items(), key=lambda kv: kv[1])]


class TorchHostComm:
    """zero_host_comm over a torch.distributed group (None: the default group).
    `.address` is what zero_engine_options.comm takes (ZERO_COMM_HOST)."""

    def __init__(self, group=None, started=True):
        """started=False: no alltoall_start/finish (every reduction blocks its
        gradient hook, as before 1.5's started exchanges)."""
        import torch
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group "
                               "first (torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for it)")
        self._torch, self._dist = torch, dist
        self.group = group if group is not None else dist.group.WORLD
        self.ranks = group_ranks(self.group)
        self.rank = dist.get_rank(self.group)
        self.size = dist.get_world_size(self.group)
        self.backend = str(dist.get_backend(self.group))
        self.cuda = self.backend == "nccl"
        self.last_error = ""
        self.calls = 0
        self._subs = {}  # address of a split's struct -> its TorchHostComm (alive until release)
        self._works = {}  # started all-to-alls: handle -> (work, host out, device out)
        self._next_handle = 1
        self._types = {0: torch.float32, 1: torch.bfloat16, 2: torch.float16, DTYPE_F64: torch.float64,
                       DTYPE_I64: torch.int64, DTYPE_U64: torch.int64,  # wrapping sums: same bits
                       DTYPE_U8: torch.uint8}
        self._name = ("torch.distributed %s group of %d" % (self.backend, self.size)).encode()
        # the callbacks: kept referenced here, or ctypes would free them under libzero
        self._cbs = (ALLREDUCE_FN(self._allreduce_sum), ALLGATHER_FN(self._allgather),
                     BROADCAST_FN(self._broadcast), BARRIER_FN(self._barrier), ALLTOALL_FN(self._alltoall),
                     SPLIT_FN(self._split), RELEASE_FN(self._release), START_FN(self._alltoall_start),
                     FINISH_FN(self._alltoall_finish), TEST_FN(self._alltoall_test))
        s = HostCommC()
        s.struct_size = ctypes.sizeof(HostCommC)
        s.rank, s.size, s.user, s.name = self.rank, self.size, None, self._name
        s.allreduce_sum, s.allgather, s.broadcast, s.barrier, s.alltoall = self._cbs[:5]
        # split makes new torch groups, which every rank of the default group
        # must create together: only possible when this group is the world
        if self.size == dist.get_world_size():
            s.split, s.release = self._cbs[5], self._cbs[6]
        if started:
            s.alltoall_start, s.alltoall_finish, s.alltoall_test = self._cbs[7:10]
        self.struct = s

    @property
    def address(self):
        return ctypes.addressof(self.struct)

    def _unlink(self):
        """Break the cycle between this object and its ctypes callbacks (and
        its splits') once libzero no longer holds the struct, so that it is
        freed at once on the calling thread.  Left to the garbage collector,
        the cycle (with the torch group it holds) was collected whenever a
        collection happened to run, at exit on another thread: a process
        that made and closed an engine over a 3-rank gloo group aborted at
        exit ("terminate called without an active exception") in about one
        run of seven.  Engine.close() calls it for the comms it made."""
        for sub in list(self._subs.values()):
            sub._unlink()
        self._subs.clear()
        self._works.clear()
        self._cbs = None
        self.struct = None

    # ------------------------------------------------------------ helpers
    def _view(self, address, nbytes, dtype):
        """A tensor over nbytes of host memory at address (no copy); on an
        NCCL group a CUDA copy of it (the caller copies back)."""
        torch = self._torch
        t = torch.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=torch.uint8)
        if dtype is not torch.uint8:
            t = t.view(dtype)
        return t

    def _dev(self, t):
        return t.cuda() if self.cuda else t

    def _back(self, host, dev):
        if dev is not host:
            host.copy_(dev.cpu())

    def _guard(self, what, fn):
        self.calls += 1
        try:
            fn()
            return ZERO_OK
        except Exception as ex:  # never let an exception cross into C
            self.last_error = "torch.distributed %s (%s group): %s: %s" % (what, self.backend, type(ex).__name__, ex)
            return ZERO_ERR_COMM

    # ------------------------------------------------------------ callbacks
    def _allreduce_sum(self, user, buf, count, dt):
        def run():
            torch = self._torch
            dtype = self._types.get(int(dt))
            if dtype is None:
                raise ValueError("dtype %d" % dt)
            if not count:
                return
            host = self._view(buf, count * torch.empty(0, dtype=dtype).element_size(), dtype)
            work = host
            if dtype in (torch.bfloat16, torch.float16) and not self.cuda:
                work = host.float()  # gloo has no 16-bit sums: fp32 sum, one rounding
            dev = self._dev(work)
            self._dist.all_reduce(dev, op=self._dist.ReduceOp.SUM, group=self.group)
            if work is not host:
                host.copy_(dev.to(dtype) if not self.cuda else dev.cpu())
            else:
                self._back(host, dev)
        return self._guard("all_reduce", run)

    def _allgather(self, user, send, recv, nbytes):
        def run():
            torch = self._torch
            out = self._view(recv, nbytes * self.size, torch.uint8)
            if not self.cuda:
                # gloo (torch 1.13, loopback TCP): all_gather of 8 MiB blocks took 23.5 ms where an
                # all_to_all_single moving the same bytes took 9 ms, so the block goes to every rank
                # as an all-to-all of P copies of it (the copy also takes care of send aliasing recv)
                rep = self._view(send, nbytes, torch.uint8).repeat(self.size)
                self._dist.all_to_all_single(out, rep, group=self.group)
                return
            src = self._view(send, nbytes, torch.uint8).clone()  # send may alias recv's own block
            dev_out = self._dev(out)
            self._dist.all_gather(list(dev_out.chunk(self.size)), self._dev(src), group=self.group)
            self._back(out, dev_out)
        return self._guard("all_gather", run)

    def _broadcast(self, user, buf, nbytes, root):
        def run():
            t = self._view(buf, nbytes, self._torch.uint8)
            dev = self._dev(t)
            self._dist.broadcast(dev, src=self.ranks[root], group=self.group)
            self._back(t, dev)
        return self._guard("broadcast", run)

    def _barrier(self, user):
        return self._guard("barrier", lambda: self._dist.barrier(group=self.group))

    def _alltoall(self, user, send, recv, nbytes):
        def run():
            torch = self._torch
            out = self._view(recv, nbytes * self.size, torch.uint8)
            src = self._dev(self._view(send, nbytes * self.size, torch.uint8))
            dev_out = self._dev(out)
            self._dist.all_to_all_single(dev_out, src, group=self.group)
            self._back(out, dev_out)
        return self._guard("all_to_all_single", run)

    def _alltoall_start(self, user, send, recv, nbytes, handle):
        def run():
            torch = self._torch
            out = self._view(recv, nbytes * self.size, torch.uint8)
            src = self._dev(self._view(send, nbytes * self.size, torch.uint8))
            dev_out = self._dev(out)  # gloo: `out` itself (libzero keeps both buffers until the finish)
            work = self._dist.all_to_all_single(dev_out, src, group=self.group, async_op=True)
            h = self._next_handle
            self._next_handle += 1
            self._works[h] = (work, out, dev_out, src)
            handle[0] = h
        return self._guard("all_to_all_single (started)", run)

    def _alltoall_finish(self, user, handle):
        def run():
            work, out, dev_out, _ = self._works.pop(int(handle))
            work.wait()
            self._back(out, dev_out)
        return self._guard("all_to_all_single (finish)", run)

    def _alltoall_test(self, user, handle, done):
        def run():
            work = self._works[int(handle)][0]
            done[0] = 1 if work.is_completed() else 0
        return self._guard("all_to_all_single (test)", run)

    def _split(self, user, color, key, out):
        def run():
            torch, dist = self._torch, self._dist
            mine = torch.tensor([color, key, self.rank], dtype=torch.int64)
            every = [torch.empty(3, dtype=torch.int64) for _ in range(self.size)]
            if self.cuda:
                mine, every = mine.cuda(), [e.cuda() for e in every]
            dist.all_gather(every, mine, group=self.group)
            table = [tuple(int(v) for v in e.cpu()) for e in every]
            colors = sorted({c for c, _, _ in table if c >= 0})
            out[0] = ctypes.POINTER(HostCommC)()
            for c in colors:  # every rank makes every group, in the same order (new_group is collective)
                members = sorted((k, r) for cc, k, r in table if cc == c)
                g = dist.new_group([self.ranks[r] for _, r in members], backend=self.backend)
                if c == color:
                    sub = TorchHostComm(g)
                    self._subs[sub.address] = sub
                    out[0] = ctypes.pointer(sub.struct)
        return self._guard("new_group (split)", run)

    def _release(self, user, sub):
        self._subs.pop(ctypes.addressof(sub.contents), None)


def default_group_active():
    """torch.distributed is imported, initialised, with more than one rank."""
    import sys
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


__all__ = ["TorchHostComm", "HostCommC", "default_group_active", "group_ranks"]
_ = L  # the package's loader is imported first (same ABI version checks)
