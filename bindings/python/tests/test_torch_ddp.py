"""zero.torch against DistributedDataParallel + torch.optim.AdamW, under mpirun.

Every rank builds the same seeded model, trains 30 steps on its own shard of
deterministic data, once with DDP (gloo) + AdamW and once per libzero stage
through zero.torch (stage0/1/2/3 and offload); the final parameters must agree
within 1e-5 relative (fp32).  Also: with stage 2 no parameter keeps a .grad
after backward and libzero's gradient memory is below a full gradient; a
bad config, a missing plugin and a non-finite gradient raise zero.ZeroError
with libzero's status and message.
--device cuda: the same comparisons with the model, DDP and zero.torch on
the GPU (libzero device_kind CUDA; DDP over gloo on CUDA tensors); exits 77
(skipped) when torch has no CUDA or libzero was built without it.  With
fewer GPUs than ranks, libzero runs comm="mpi" (device buffers staged
through host memory: NCCL refuses two ranks on one GPU).
--group-backend nccl (torchrun-style launch only): the torch.distributed
group is NCCL instead of gloo and libzero trains over it even at world size
1 (zero.TorchHostComm's NCCL path: host buffers copied to the GPU for each
collective); the stage comparisons only (the extras assume gloo).
Usage: mpirun -np N python3 test_torch_ddp.py [--device cpu|cuda] [--group-backend gloo|nccl]
       [mlp|transformer] [steps] [stages...]"""
import os
import sys

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.distributed as dist
import torch.nn as nn

import zero
import zero.torch as zt

# mpirun, or (run_torch_group.py, torchrun) RANK/WORLD_SIZE: libzero then
# trains over the torch.distributed group itself (ZERO_COMM_HOST, ABI 1.5)
TORCH_LAUNCH = "OMPI_COMM_WORLD_SIZE" not in os.environ and "WORLD_SIZE" in os.environ
ARGS = sys.argv[1:]
DEVICE = "cpu"
if "--device" in ARGS:
    k = ARGS.index("--device")
    DEVICE = ARGS[k + 1]
    del ARGS[k:k + 2]
GPU = DEVICE != "cpu"
COMM = "auto"
GROUP_BACKEND = "gloo"
if "--group-backend" in ARGS:
    k = ARGS.index("--group-backend")
    GROUP_BACKEND = ARGS[k + 1]
    del ARGS[k:k + 2]
MB = 4
# one id per mpirun job, the same on its ranks: gloo's port and the checkpoint dir
JOB = os.environ.get("OMPI_MCA_ess_base_jobid", os.environ.get("MASTER_PORT", str(os.getpid())))


class Block(nn.Module):
    """A small pre-norm transformer block + head."""

    def __init__(self, d=16, heads=2, seq=6, out=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        # no attention biases: the key bias has a mathematically zero gradient
        # (softmax is shift-invariant), so Adam turns its rounding noise into
        # full-size steps and no two implementations agree on it
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d * seq, out)
        self.seq, self.d = seq, d

    def forward(self, x):
        x = x.view(-1, self.seq, self.d)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.ff(self.ln2(x))
        return self.head(x.reshape(x.shape[0], -1))


class TinyLM(nn.Module):
    """Tied weights (docs/bindings.md): the output projection IS the embedding."""

    def __init__(self, vocab=50, d=12):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.out = nn.Linear(d, vocab, bias=False)
        self.out.weight = self.emb.weight
        self.vocab = vocab

    def forward(self, x):
        ids = (x.abs() * 1000).long() % self.vocab  # deterministic ids from the float batch
        return self.out(torch.tanh(self.emb(ids[:, :3]).mean(1)))[:, :4]


def make_model(kind):
    torch.manual_seed(1234)
    if kind == "transformer":
        m = Block()
    elif kind == "tied":
        m = TinyLM()
    else:
        m = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    return m.to(DEVICE)


def batch(kind, step):
    g = torch.Generator().manual_seed(10_000 + step * 97 + RANK)
    din = 96 if kind == "transformer" else 12
    x = torch.randn(MB, din, generator=g)
    y = torch.randn(MB, 4, generator=g)
    return x.to(DEVICE), y.to(DEVICE)


LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01


def ds_config(stage, offload=False, **extra):
    c = {"train_micro_batch_size_per_gpu": MB,
         "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD}},
         "zero_optimization": {"stage": stage}}
    if offload:
        c["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    c.update(extra)
    return c


def train_ddp(kind, steps):
    model = make_model(kind)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    for s in range(steps):
        x, y = batch(kind, s)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def train_zero(kind, steps, stage, plugin=None, storage="host"):
    model = make_model(kind).cpu() if stage == 2 else make_model(kind)  # stage 2: initialize(device=) moves it
    # stage 1 runs with the torch.distributed world as its group (it is the MPI world)
    engine, opt, _, _ = zt.initialize(model, ds_config(stage if stage != "offload" else 2,
                                                       offload=stage == "offload"),
                                      plugin="offload" if stage == "offload" else plugin,
                                      process_group=dist.group.WORLD if stage == 1 else None,
                                      param_storage=storage, comm=COMM,
                                      device=DEVICE if stage == 2 else None)
    check(all(p.device == torch.device(DEVICE) for p in model.parameters()),
          "stage %s: the model is on %s" % (stage, DEVICE))
    check(engine.world_size == WORLD and (engine.z._hostcomm is not None) == TORCH_LAUNCH,
          "stage %s: world %d over %s" % (stage, engine.world_size, "host comm" if engine.z._hostcomm else "MPI"))
    grads_left = 0
    for s in range(steps):
        x, y = batch(kind, s)
        loss = nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        grads_left += sum(p.grad is not None for p in model.parameters())
        r = engine.step()
        check(r.boundary and r.taken, "stage %s step %d taken" % (stage, s))
    check(grads_left == 0, "stage %s: %d .grad tensors kept after backward" % (stage, grads_left))
    engine.eval()  # eval forward without autograd: stage 3 gathers and empties per module
    if kind != "transformer":  # torch 1.13's MHA eval fast path fails without attention biases (a torch bug)
        with torch.no_grad():
            out_eval = engine(batch(kind, 0)[0])
        check(torch.isfinite(out_eval).all(), "stage %s: eval forward" % stage)
    engine.train()
    with engine.gathered_parameters() as ps:
        out = [p.detach().clone() for p in ps]
    st = engine.state
    check(st["global_step"] == steps, "state global_step %s" % st["global_step"])
    engine.close()
    after = [p.detach().clone() for p in model.parameters()]
    check(all(torch.equal(a, b) for a, b in zip(after, out)), "stage %s: the model keeps its values after close"
          % stage)
    return out, st


def rel(a, b):
    a, b = [x.cpu() for x in a], [y.cpu() for y in b]
    num = sum(float(((x.double() - y.double()) ** 2).sum()) for x, y in zip(a, b)) ** 0.5
    den = sum(float((y.double() ** 2).sum()) for y in b) ** 0.5
    return num / den


def errors():
    def expect(fn, status, needle, what):
        try:
            fn()
        except zero.ZeroError as ex:
            check(ex.status_name == status and needle in ex.message,
                  "%s: got %s %r" % (what, ex.status_name, ex.message))
            return
        check(False, "%s: no ZeroError" % what)

    expect(lambda: zt.initialize(make_model("mlp"), {"train_micro_batch_size_per_gpu": MB,
                                                     "zero_optimization": {"stage": 7}}),
           "ZERO_ERR_CONFIG", "zero_optimization.stage", "bad config")
    expect(lambda: zt.initialize(make_model("mlp"), ds_config(1), plugin="no-such-plugin"),
           "ZERO_ERR_PLUGIN_NOT_FOUND", "libzero-plugin-no-such-plugin.so", "missing plugin")
    # a NaN gradient: libzero refuses the step at the minimum fp16 loss scale (ZERO_ERR_LOSS_SCALE).
    # CPU torch 1.13 has no fp16 matmul, so the model is an elementwise one.
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(8))

        def forward(self, x):
            return (self.w * x).sum()
    fp16 = ds_config(2, fp16={"enabled": True, "initial_scale_power": 0, "hysteresis": 1, "min_loss_scale": 1})
    e, _, _, _ = zt.initialize(Scale(), fp16)
    x = torch.ones(8, dtype=torch.float16)
    x[3] = float("nan")
    e.backward(e(x))
    expect(e.step, "ZERO_ERR_LOSS_SCALE", "rank %d: fp16 overflow" % RANK, "NaN gradient")
    e.close()
    # fp16 above the minimum scale: an overflow only lowers the scale (DeepSpeed), no exception
    fp16 = ds_config(2, fp16={"enabled": True, "initial_scale_power": 4, "hysteresis": 1, "min_loss_scale": 1})
    e, _, _, _ = zt.initialize(Scale(), fp16)
    e.backward(e(x))
    r = e.step()
    check(r.overflow and not r.taken and e.loss_scale == 8, "fp16 overflow above min scale: %r" % r)
    e.close()
    # fp32 and bf16 have no loss scaler: a NaN gradient raises by default, every rank
    # (libzero agrees on overflow), the step skipped; raise_on_nonfinite=False reports it
    for dt in (torch.float32, torch.bfloat16):
        extra = {"bf16": {"enabled": True}} if dt == torch.bfloat16 else {}
        model = Scale()
        e, _, _, _ = zt.initialize(model, ds_config(2, **extra))
        w0 = model.w.detach().clone()
        xb = torch.ones(8, dtype=dt)
        if RANK == WORLD - 1:  # one rank's NaN is everyone's
            xb[3] = float("nan")
        e.backward(e(xb))
        try:
            e.step()
            check(False, "%s NaN gradient: no exception" % dt)
        except zt.NonFiniteGradientError as ex:
            check(isinstance(ex, zero.ZeroError) and ex.status_name == "ZERO_ERR_LOSS_SCALE"
                  and ex.message.startswith("rank %d: non-finite gradient" % RANK) and ex.result.overflow
                  # libzero's own text: which rank found it, in which param (issue 31)
                  and "non-finite gradient (Inf/NaN) found on rank" in ex.message and "(param '" in ex.message,
                  "%s NaN gradient: %r" % (dt, ex.message))
        check(torch.equal(model.w.detach(), w0), "%s: the NaN step was skipped" % dt)
        e.backward(e(torch.ones(8, dtype=dt)))  # training goes on after the exception
        r = e.step()
        # (bf16: an lr-1e-3 update of 1.0 is below bf16's resolution, so only fp32 shows it moving)
        check(r.taken and (dt == torch.bfloat16 or not torch.equal(model.w.detach(), w0)),
              "%s: the next finite step is taken" % dt)
        e.close()
        e, _, _, _ = zt.initialize(Scale(), ds_config(2, **extra), raise_on_nonfinite=False)
        e.backward(e(xb))
        r = e.step()
        check(r.overflow and not r.taken, "%s raise_on_nonfinite=False: %r" % (dt, r))
        e.close()
    # torchrun-style launch (WORLD_SIZE without mpirun) with torch.distributed
    # not initialised is refused, not trained alone
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PMIX_", "MPI_"))}
    env.update(WORLD_SIZE="2", RANK="0", LOCAL_RANK="0")
    import subprocess
    code = ("import torch, zero.torch as zt\n"
            "try:\n    zt.initialize(torch.nn.Linear(2, 2), {'train_micro_batch_size_per_gpu': 1})\n"
            "except zt.ZeroError as ex:\n    print(ex.status_name, ex.message)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60).stdout
    check("ZERO_ERR_UNSUPPORTED" in out and "torch.distributed is not initialised" in out
          and "init_process_group" in out, "uninitialised torchrun-style launch refused: %r" % out)
    if TORCH_LAUNCH:
        host_comm_errors()
        host_comm_split()
        host_comm_freed_at_close()


def host_comm_split():
    """zero.TorchHostComm's split callback as libzero calls it (MoE, MiCS,
    pipelines): even and odd ranks form two groups (torch new_group, every
    rank making both), a sum runs inside each, release drops it; color < 0
    gets NULL."""
    import ctypes
    from zero import _hostcomm as HC
    hc = zero.TorchHostComm()
    out = ctypes.POINTER(HC.HostCommC)()
    st = hc.struct.split(None, RANK % 2, RANK, ctypes.byref(out))
    mates = [r for r in range(WORLD) if r % 2 == RANK % 2]
    check(st == 0 and bool(out) and out.contents.size == len(mates) and out.contents.rank == mates.index(RANK),
          "split: status %d, %s" % (st, (out.contents.rank, out.contents.size) if out else None))
    if st == 0 and out:
        v = ctypes.c_double(RANK + 1.0)
        st = out.contents.allreduce_sum(None, ctypes.addressof(v), 1, HC.DTYPE_F64)
        check(st == 0 and v.value == sum(r + 1.0 for r in mates), "sum in the split group: %s" % v.value)
        hc.struct.release(None, out)
    check(not hc._subs, "release dropped the split group")
    none = ctypes.POINTER(HC.HostCommC)()
    st = hc.struct.split(None, -1 if RANK == 0 else 0, RANK, ctypes.byref(none))
    check(st == 0 and (not none if RANK == 0 else none.contents.size == WORLD - 1), "split with color < 0")
    if none:
        hc.struct.release(None, none)


def host_comm_freed_at_close():
    """The TorchHostComm an engine made over the default group is freed by
    close() itself, with no garbage collection: left to one, it ran at exit
    on another thread and the process aborted there ("terminate called
    without an active exception", about 1 run in 7 before 1.7.3).  One the
    caller passed stays usable for the next engine."""
    import gc
    import weakref
    gc.disable()  # a collection must not be what frees it
    try:
        e = zero.Engine({"train_micro_batch_size_per_gpu": 1}, comm="torch")
        made = weakref.ref(e._hostcomm)
        e.close()
        check(made() is None, "close() left the engine's TorchHostComm to the garbage collector")
        mine = zero.TorchHostComm()
        for _ in range(2):  # the caller's comm: two engines, one after the other
            e = zero.Engine({"train_micro_batch_size_per_gpu": 1}, comm=mine)
            check(e.world_size == WORLD, "an engine over the caller's TorchHostComm: world %d" % e.world_size)
            e.close()
        check(mine.struct is not None, "close() unlinked a TorchHostComm the caller owns")
    finally:
        gc.enable()


def host_comm_errors():
    """Over a torch.distributed group: a collective that fails inside a
    callback comes back as ZERO_ERR_COMM with libzero's text and torch's
    exception; a CUDA-only group op on gloo is what fails here."""
    hc = zero.TorchHostComm()
    e, _, _, _ = zt.initialize(make_model("mlp"), ds_config(2), comm=hc)
    check(hc.calls > 0 and e.world_size == WORLD, "engine over a zero.TorchHostComm: %d callbacks" % hc.calls)
    real = hc._dist.all_to_all_single

    def broken(*a, **k):
        raise RuntimeError("simulated transport failure")
    hc._dist = type("D", (), {})()
    for name in ("all_reduce", "all_gather", "broadcast", "barrier", "ReduceOp"):
        setattr(hc._dist, name, getattr(dist, name))
    hc._dist.all_to_all_single = broken
    x, y = batch("mlp", 0)
    try:
        e.backward(nn.functional.mse_loss(e(x), y))
        e.step()
        check(False, "a failing torch collective: no exception")
    except zero.ZeroError as ex:
        check(ex.status_name == "ZERO_ERR_COMM" and "callback returned" in ex.message and "alltoall" in ex.message
              and "simulated transport failure" in ex.message, "failing callback: %r" % ex.message)
        if RANK == 0:
            print("N=%d failing torch collective -> %s" % (WORLD, ex))
    hc._dist.all_to_all_single = real
    e.close()


def dlpack_views():
    """The DLPack wrapper zero.torch uses for libzero's CUDA memory, on host
    memory (the struct layout, dtypes, no copy, the deleter): writes through
    the tensor land in the buffer, and every capsule is released after."""
    import array
    import gc
    from zero import _dlpack
    base = _dlpack.live()
    for dt, fmt, one in ((torch.float32, "f", 1.0), (torch.float16, "H", 0x3C00), (torch.bfloat16, "H", 0x3F80)):
        buf = array.array(fmt, [0] * 5)
        addr = buf.buffer_info()[0]
        t = zt._dlpack_tensor(addr, 5, dt, torch.device("cpu"))
        check(t.dtype == dt and t.shape == (5,) and t.data_ptr() == addr, "dlpack view %s" % dt)
        t[2] = 1.0
        check(list(buf) == [0, 0, one, 0, 0], "dlpack %s: a write through the tensor lands in the buffer: %r"
              % (dt, list(buf)))
        del t
    gc.collect()
    check(_dlpack.live() == base, "dlpack capsules released: %d held" % (_dlpack.live() - base))
    # a whole training with every libzero buffer wrapped as on CUDA (grad buffers, stage 3 gathers, views)
    ref = train_ddp("mlp", 10)
    zt.ZeroEngine.DLPACK_ON_CPU = True
    try:
        for st, storage in ((2, "host"), (3, "host"), (2, "libzero")):
            got, _ = train_zero("mlp", 10, st, storage=storage)
            d = rel(got, ref)
            check(d <= 1e-5, "DLPack-wrapped stage %s (%s): rel %.3e" % (st, storage, d))
    finally:
        zt.ZeroEngine.DLPACK_ON_CPU = False
    gc.collect()
    check(_dlpack.live() == base, "dlpack capsules released after training: %d held" % (_dlpack.live() - base))
    if RANK == 0:
        print("N=%d DLPack-wrapped training (stage 2, 3, 2 views) == DDP+AdamW: ok" % WORLD)


def grad_accumulation(steps):
    """gradient_accumulation_steps 2 with zero.torch (two micro-batches of MB,
    engine.step() after each) == DDP + AdamW on the 2*MB batch."""
    def batch2(s):
        a, b = batch("mlp", 2 * s), batch("mlp", 2 * s + 1)
        return torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])
    model = make_model("mlp")
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    for s in range(steps):
        x, y = batch2(s)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    ref = [p.detach().clone() for p in model.parameters()]
    model = make_model("mlp")
    engine, _, _, _ = zt.initialize(model, ds_config(2, gradient_accumulation_steps=2), comm=COMM)
    for s in range(steps):
        x, y = batch2(s)
        for m in range(2):
            engine.backward(nn.functional.mse_loss(engine(x[m * MB:(m + 1) * MB]), y[m * MB:(m + 1) * MB]))
            r = engine.step()
            check(r.boundary == (m == 1), "gas 2: boundary flag at micro-step %d" % m)
    d = rel([p.detach() for p in model.parameters()], ref)
    if RANK == 0:
        print("N=%d %-11s %-8s vs DDP+AdamW after %d steps: rel L2 %.2e" % (WORLD, "mlp gas=2", 2, steps, d))
    check(d <= 1e-5, "gas 2: rel %.3e" % d)
    engine.close()


def subgroups(steps):
    """Two data-parallel groups of 2 ranks each ([0, 1] and [2, 3]) train
    independently: zero.torch with process_group == DDP over the same group."""
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank makes both
    mine = groups[RANK // 2]
    model = make_model("mlp")
    ddp = nn.parallel.DistributedDataParallel(model, process_group=mine)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    for s in range(steps):
        x, y = batch("mlp", s)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    ref = [p.detach().clone() for p in model.parameters()]
    model = make_model("mlp")
    engine, _, _, _ = zt.initialize(model, ds_config(2), process_group=mine)
    check(engine.world_size == 2 and engine.global_rank == RANK % 2,
          "group engine: rank %d of %d" % (engine.global_rank, engine.world_size))
    for s in range(steps):
        x, y = batch("mlp", s)
        engine.backward(nn.functional.mse_loss(engine(x), y))
        engine.step()
    d = rel([p.detach() for p in model.parameters()], ref)
    print("N=%d rank %d: group of 2, stage 2 vs DDP(process_group) after %d steps: rel L2 %.2e"
          % (WORLD, RANK, steps, d))
    check(d <= 1e-5, "torch.distributed group: rel %.3e" % d)
    engine.close()


def extras():
    """save/load through zero.torch, lr through optimizer.param_groups, bf16."""
    import shutil
    import tempfile
    model = make_model("mlp")
    engine, opt, _, _ = zt.initialize(model, ds_config(2), comm=COMM)
    tmp = os.path.join(tempfile.gettempdir(), "zero-torch-ckpt-%s" % JOB)  # the same on every rank
    def run(n, start):
        for s in range(start, start + n):
            x, y = batch("mlp", s)
            engine.backward(nn.functional.mse_loss(engine(x), y))
            r = engine.step()
        return r
    opt.param_groups[0]["lr"] = 4e-3  # a host schedule's values: saved with the checkpoint (1.4)
    opt.param_groups[0]["betas"] = (0.8, 0.95)
    run(3, 0)
    engine.save(tmp)
    saved = [p.detach().clone() for p in model.parameters()]
    run(2, 3)
    after5 = [p.detach().clone() for p in model.parameters()]
    check(any(not torch.equal(a, p) for a, p in zip(saved, model.parameters())), "training moved the params")
    engine.load(tmp)
    check(all(torch.equal(a, p) for a, p in zip(saved, model.parameters())), "load restored the model's tensors")
    # (1.8) the checkpoint's step (3); before, state said the last step()'s (5) until the next step
    check(engine.state["global_step"] == 3, "state after load %r" % engine.state["global_step"])
    # a fresh engine (the config's lr and betas) resumes bitwise: load brings the hparams back
    model2 = make_model("mlp")
    engine2, opt2, _, _ = zt.initialize(model2, ds_config(2), comm=COMM)
    engine2.load(tmp)
    check(opt2.param_groups[0]["lr"] == 4e-3 and tuple(opt2.param_groups[0]["betas"]) == (0.8, 0.95),
          "param_groups after load: %r" % {k: v for k, v in opt2.param_groups[0].items() if k != "params"})
    for s in range(3, 5):
        x, y = batch("mlp", s)
        engine2.backward(nn.functional.mse_loss(engine2(x), y))
        engine2.step()
    check(all(torch.equal(a, p) for a, p in zip(after5, model2.parameters())),
          "resumed from the checkpoint == the saving run, bitwise")
    engine2.close()
    opt.param_groups[0]["lr"] = 0.0  # a host schedule: lr 0 freezes the model
    before = [p.detach().clone() for p in model.parameters()]
    r = run(1, 5)
    check(r.lr == 0.0 and all(torch.equal(a, p) for a, p in zip(before, model.parameters())),
          "param_groups lr pushed to libzero (lr %r)" % r.lr)
    engine.close()
    dist.barrier()
    if RANK == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    # bf16: the model is converted, trains, stays finite
    model = make_model("mlp")
    engine, _, _, _ = zt.initialize(model, ds_config(2, bf16={"enabled": True}), comm=COMM)
    check(all(p.dtype == torch.bfloat16 for p in model.parameters()), "bf16 model")
    losses = []
    for s in range(20):
        x, y = batch("mlp", 0)  # one batch: its loss must fall
        loss = nn.functional.mse_loss(engine(x.bfloat16()).float(), y)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    check(losses[-1] < losses[0] and all(torch.isfinite(p.float()).all() for p in model.parameters()),
          "bf16 training %r" % losses[::5])
    engine.close()


def gpu_or_skip():
    """--device cuda: exit 77 (ctest: skipped) with the reason when torch
    has no CUDA or libzero was built without it; pick comm for the GPUs."""
    global COMM
    if not torch.cuda.is_available():
        print("SKIPPED: torch %s has no usable CUDA (torch.cuda.is_available() is False)" % torch.__version__)
        sys.exit(77)
    try:
        zero.Engine({"train_micro_batch_size_per_gpu": 1}, comm="self", device="cuda").close()
    except zero.ZeroError as ex:
        if "built without CUDA" in ex.message:
            print("SKIPPED: %s" % ex.message)
            sys.exit(77)
        raise
    global DEVICE
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", RANK))
    DEVICE = "cuda:%d" % (local % torch.cuda.device_count())  # every model of this rank lives there
    torch.cuda.set_device(DEVICE)
    if torch.cuda.device_count() < WORLD and not TORCH_LAUNCH:
        COMM = "mpi"  # NCCL refuses two ranks on one GPU: device buffers staged through host memory
    # (launched torchrun-style, libzero trains over the gloo group, its device buffers staged likewise)
    if RANK == 0:
        print("GPU run: %d rank(s) on %d GPU(s) (%s), libzero comm %s"
              % (WORLD, torch.cuda.device_count(), torch.cuda.get_device_name(0), COMM))


def main():
    global COMM
    if GPU:
        gpu_or_skip()
    kind = ARGS[0] if len(ARGS) > 0 else "mlp"
    steps = int(ARGS[1]) if len(ARGS) > 1 else 30
    # "2z" / "offloadz": param_storage="libzero" (the model's tensors are views of libzero's copy)
    stages = ARGS[2:] or ["0", "1", "2", "3", "offload", "2z", "offloadz"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + int(JOB) % 20000))
    dist.init_process_group(GROUP_BACKEND, rank=RANK, world_size=WORLD)
    if GROUP_BACKEND != "gloo":
        COMM = zero.TorchHostComm()  # over this group even at world size 1 ("auto" picks it only above 1)
    if RANK == 0:
        print("N=%d libzero over %s" % (WORLD, "the torch.distributed %s group (ZERO_COMM_HOST), no mpirun" % GROUP_BACKEND
                                       if TORCH_LAUNCH else "MPI (mpirun)"))
    ref = train_ddp(kind, steps)
    for st in stages:
        storage = "libzero" if st.endswith("z") else "host"
        base = st[:-1] if st.endswith("z") else st
        stage = base if base == "offload" else int(base)
        got, state = train_zero(kind, steps, stage, storage=storage)
        d = rel(got, ref)
        if RANK == 0:
            print("N=%d %-11s %-8s vs DDP+AdamW after %d steps: rel L2 %.2e" % (WORLD, kind, st, steps, d))
        check(d <= 1e-5, "%s stage %s: rel %.3e > 1e-5" % (kind, st, d))
        if stage == 2 and WORLD > 1:
            n = sum(p.numel() for p in ref)
            # libzero's persistent gradient memory is this rank's partition (plus
            # alignment), not a full gradient; its staging buckets are bounded
            # separately (and floor-sized, so not compared on a model this small)
            g = state["memory"]["peak"]["device"]["grads"]
            if RANK == 0:
                print("N=%d stage 2 gradient partition %d bytes, full gradient %d bytes" % (WORLD, g, 4 * n))
            check(g <= 4 * n / WORLD + 64 * 2 * WORLD, "stage 2 keeps %d gradient bytes, a full gradient is %d"
                  % (g, 4 * n))
    if kind == "mlp" and GROUP_BACKEND == "gloo":
        extras()
        grad_accumulation(steps)
        if WORLD == 4:
            subgroups(steps)
        ref = train_ddp("tied", steps)
        for st in (2, 3):
            got, _ = train_zero("tied", steps, st)
            d = rel(got, ref)
            if RANK == 0:
                print("N=%d %-11s %-8s vs DDP+AdamW after %d steps: rel L2 %.2e" % (WORLD, "tied", st, steps, d))
            check(len(got) == 1 and d <= 1e-5, "tied weights stage %s: rel %.3e" % (st, d))
        if not GPU:  # CPU-only models (fp16 elementwise) and launcher checks
            errors()
            dlpack_views()
    dist.destroy_process_group()
    if failures:
        return 1
    if RANK == 0:
        print("test_torch_ddp %s: all checks passed on %d ranks" % (kind, WORLD))
    return 0


if __name__ == "__main__":
    sys.exit(main())
