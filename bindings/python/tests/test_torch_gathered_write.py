"""DeepSpeed's GatheredParameters(params, modifier_rank=r) in zero.torch (ABI
1.10 zero_params_write), under mpirun -np N (N >= 2).

A seeded model (Embedding + two Linear) trains 2 steps with AdamW; then

    with zt.GatheredParameters([emb.weight, lin.bias], modifier_rank=1):
        on rank 1: emb.weight.data[3] = 7.0; nn.init.constant_(lin.bias, 0.5)
        on the other ranks: other values (discarded)

and trains 2 more steps.  For stage 0, 1, 2, 3, offload and stage 2 with
param_storage="libzero", fp32 and bf16:
  * after the block every rank's gathered model holds rank 1's values in
    the written places and, bitwise, the values before the block elsewhere;
  * the 2 steps after it are not refused (the block's writes are no host
    write for zero.torch's and libzero's checks);
  * every stage ends bitwise equal to stage 0 (the project's standard);
  * fp32: every tensor within 1e-6 (relative L2) of torch itself: the same
    model with torch.optim.AdamW, gradients averaged with all_reduce (gloo),
    the same modification at the same point.
Also: engine.gathered_parameters(p, modifier_rank) on one tensor, a
parameter replaced inside the block by a tensor of the same kind (taken) or
of another dtype (refused on every rank, nothing written; the parameter's
gradient still reaches libzero after); an expert parameter (its own group:
modifier_rank 0 keeps each rank's value, 1 is refused); refusals: a write
outside a block (in place, or through p.data: libzero's check) and a write
inside one to a parameter the block does not list (at the next step, stage
3 at the block's end), a write through p.data in a read-only stage-3 block,
modifier_rank outside the group or not an int, a block between backward
and step or inside a window of gradient_accumulation_steps 2 (libzero's
ZERO_ERR_STATE, on every rank, before the block's code runs), parameters
of no engine; enabled=False is a no-op.
Usage: mpirun -np N python3 test_torch_gathered_write.py [stage ...] (default: all six, stage0 first)"""
import contextlib
import os
import sys
import time

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.distributed as dist
import torch.nn as nn

import zero
import zero.torch as zt

MB = 4
LR, BETAS, EPS, WD = 1e-2, (0.9, 0.999), 1e-8, 0.01
TOL = 1e-6
ROOT = 1  # the modifier rank: not 0, so that a rank-0 default would show
JOB = os.environ.get("OMPI_MCA_ess_base_jobid", str(os.getpid()))
# stage0 first: the base; stage2-libzero: param_storage="libzero" (the model's tensors are libzero's memory)
STAGES = tuple(sys.argv[1:]) or ("stage0", "stage1", "stage2", "stage2-libzero", "stage3", "offload")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.lin = nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, ids):
        return self.out(torch.tanh(self.lin(self.emb(ids))))


def make_model():
    torch.manual_seed(1234)
    return Net()


def cfg_of(stage, bf16=False, gas=1):
    cfg = {"train_micro_batch_size_per_gpu": MB, "gradient_accumulation_steps": gas,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                                     "weight_decay": WD}},
           "zero_optimization": {"stage": 2 if stage == "offload" else int(stage[5])}}
    if stage == "offload":
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if bf16:
        cfg["bf16"] = {"enabled": True}
    return cfg


LOST = []  # libzero's warnings of gradients that never arrived: a block must not cut a parameter off


def log(level, rank, msg):
    if "never arrived" in msg:
        LOST.append(msg)
    print("[zero rank %d] %s" % (rank, msg), file=sys.stderr)


def build(stage, bf16=False, gas=1, model=None):
    model = model or make_model()
    engine, _, _, _ = zt.initialize(model, cfg_of(stage, bf16, gas), plugin="offload" if stage == "offload" else None,
                                    param_storage="libzero" if stage.endswith("-libzero") else "host", log=log)
    return model, engine


def shard(step, rank):
    g = torch.Generator().manual_seed(10_000 + step * 97 + rank)
    return torch.randint(0, 10, (MB,), generator=g), torch.randn(MB, 4, generator=g)


def loss_of(out, y):
    return nn.functional.mse_loss(out.float(), y)


def train_step(engine, step):
    ids, y = shard(step, RANK)
    engine.backward(loss_of(engine(ids), y))
    return engine.step()


def modify(emb, lin):
    """The block's body: rank ROOT's change is the one kept; the others
    write something else, which must be discarded."""
    with torch.no_grad():
        if RANK == ROOT:
            emb.weight.data[3] = 7.0
            nn.init.constant_(lin.bias, 0.5)
        else:
            emb.weight.data[3] = -1.0
            lin.bias.data.fill_(-2.0)
            emb.weight.data[5] = 3.0


def state(engine):
    """The whole model, gathered (stage 3), as {name: copy}."""
    with engine.gathered_parameters():
        return {n: p.detach().clone() for n, p in engine.module.named_parameters()}


def expect_error(fn, kind, needles, what, status=None):
    """fn() must raise `kind` (status_name `status` for a ZeroError) whose text holds every needle."""
    try:
        fn()
    except kind as ex:
        text = str(ex)
        if status is not None:
            check(ex.status_name == status, "%s: %s, not %s (%s)" % (what, ex.status_name, status, text))
        missing = [n for n in needles if n not in text]
        check(not missing, "%s: message lacks %s: %s" % (what, missing, text))
        return ex
    except Exception as ex:  # another exception: reported as a failure, not a crash
        check(False, "%s: %s: %s, expected %s" % (what, type(ex).__name__, ex, kind.__name__))
        return None
    check(False, "%s: no error" % what)
    return None


# ---------------------------------------------------------------- the main comparison
def run_zero(stage, bf16):
    """Train 2 steps, the block, 2 steps; returns the final state.  Checks
    the state right after the block."""
    what = "%s%s" % (stage, " bf16" if bf16 else "")
    model, engine = build(stage, bf16)
    try:
        for s in range(2):
            train_step(engine, s)
        before = state(engine)
        with zt.GatheredParameters([model.emb.weight, model.lin.bias], modifier_rank=ROOT):
            check(model.emb.weight.numel() == 80 and model.lin.bias.numel() == 8,
                  "%s: the block's parameters are not full inside it" % what)
            modify(model.emb, model.lin)
        after = state(engine)
        want = {n: t.clone() for n, t in before.items()}
        want["emb.weight"][3] = 7.0
        want["lin.bias"].fill_(0.5)
        for n in want:
            check(torch.equal(after[n], want[n]), "%s: after the block %s is not rank %d's value / its value before "
                  "(max diff %g)" % (what, n, ROOT, float((after[n].float() - want[n].float()).abs().max())))
        for s in range(2, 4):
            try:
                r = train_step(engine, s)
                check(r.taken, "%s: step %d after the block not taken" % (what, s))
            except zero.ZeroError as ex:
                check(False, "%s: step %d after the block refused: %s" % (what, s, ex))
                break
        return state(engine)
    except zero.ZeroError as ex:
        check(False, "%s: %s" % (what, ex))
        return None
    finally:
        engine.close()


def run_torch():
    """torch.optim.AdamW, gradients averaged over the ranks with all_reduce,
    the same modification (rank ROOT's, broadcast) at the same point."""
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    for s in range(4):
        if s == 2:
            with torch.no_grad():
                model.emb.weight[3] = 7.0
                model.lin.bias.fill_(0.5)
        ids, y = shard(s, RANK)
        opt.zero_grad()
        loss_of(model(ids), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= WORLD
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def compare_all():
    ref = run_torch()
    for bf16 in (False, True):
        base = None
        for stage in STAGES:
            got = run_zero(stage, bf16)
            what = "%s%s" % (stage, " bf16" if bf16 else "")
            if got is None:
                continue
            if base is None:
                base = got
            for n in got:
                check(torch.equal(got[n], base[n]), "%s: %s not bitwise equal to stage 0's (max diff %g)"
                      % (what, n, float((got[n].float() - base[n].float()).abs().max())))
                if not bf16:
                    d = rel(got[n], ref[n])
                    check(d <= TOL, "%s: %s %.3e from torch's AdamW run, above %.0e" % (what, n, d, TOL))
            if RANK == 0:
                print("  %-20s %s" % (what, "" if bf16 else "vs torch: " + " ".join(
                    "%s %.1e" % (n, rel(got[n], ref[n])) for n in got)))


# ---------------------------------------------------------------- the other forms, refusals
def engine_form(stage):
    """engine.gathered_parameters(one tensor, modifier_rank) and a
    replacement of p.data: by a tensor of the same kind (written; below
    stage 3 the parameter keeps its registered tensor), by one of another
    dtype on the modifier rank (refused on every rank, nothing written)."""
    model, engine = build(stage)
    try:
        train_step(engine, 0)
        ptr = model.lin.bias.data_ptr()
        with engine.gathered_parameters(model.lin.bias, modifier_rank=ROOT) as ps:
            check(len(ps) == 1 and ps[0] is model.lin.bias, "%s: the engine's block yields %r" % (stage, ps))
            model.lin.bias.data = torch.full((8,), 0.25 if RANK == ROOT else -4.0)
        got = state(engine)["lin.bias"]
        check(torch.equal(got, torch.full((8,), 0.25)), "%s: a replaced tensor was not written: %s" % (stage, got))
        if stage != "stage3":
            check(model.lin.bias.data_ptr() == ptr, "%s: the parameter lost its registered tensor" % stage)
        train_step(engine, 1)
        before = state(engine)

        def bad_dtype():
            with zt.GatheredParameters(model.lin.bias, modifier_rank=ROOT):
                model.lin.bias.data = torch.zeros(8, dtype=torch.float64)
        needles = ["'lin.bias'", "float64", "nothing was written"] if RANK == ROOT else ["rank %d" % ROOT]
        expect_error(bad_dtype, zero.ZeroError, needles, "%s: a float64 tensor in the block" % stage,
                     status="ZERO_ERR_INVALID_ARGUMENT")
        after = state(engine)
        check(all(torch.equal(after[n], before[n]) for n in after), "%s: the refused block wrote" % stage)
        check(model.lin.bias.dtype == torch.float32, "%s: the refused tensor stayed in the model" % stage)
        check(train_step(engine, 2).taken, "%s: training after the refused block" % stage)
    except zero.ZeroError as ex:
        check(False, "%s engine form: %s" % (stage, ex))
    finally:
        engine.close()


def outside_writes(stage):
    """The host-write check still refuses what a block did not write: a
    parameter the block does not list, written inside it (at the next step;
    stage 3: at the end of the read-only block around it that gathered the
    parameter), and a write after the block (at the next step)."""
    model, engine = build(stage)
    train_step(engine, 0)
    stage3 = stage == "stage3"

    def unlisted():
        # stage 3: out.weight is empty outside its module's forward, so a read-only
        # block around the modifier block gathers it (a nested block: the inner one
        # gathers lin.bias again after its write)
        with engine.gathered_parameters() if stage3 else contextlib.nullcontext():
            with zt.GatheredParameters([model.lin.bias], modifier_rank=ROOT):
                with torch.no_grad():
                    model.lin.bias.fill_(1.0)
                    model.out.weight.mul_(2.0)
            if stage3:
                check(torch.equal(model.lin.bias, torch.ones(8)), "stage3: the nested block's parameter, gathered "
                      "again after the write, is not rank %d's value" % ROOT)
        if not stage3:
            train_step(engine, 1)
    ex = expect_error(unlisted, zero.ZeroError, ["'out.weight'"], "%s: an unlisted parameter written in the block"
                      % stage, status="ZERO_ERR_STATE")
    check(ex is None or "'lin.bias'" not in ex.message, "%s: the block's own parameter refused: %s" % (stage, ex))
    engine.close()
    if stage3:
        # a read-only block: a write through p.data (no version counter moves) is lost with the gathered copy
        model, engine = build(stage)
        train_step(engine, 0)

        def data_write():
            with zt.GatheredParameters([model.lin.bias]):
                model.lin.bias.data[0] = 9.0
        expect_error(data_write, zero.ZeroError, ["'lin.bias'", "written while gathered"],
                     "stage3: a write through p.data in a read-only block", status="ZERO_ERR_STATE")
        engine.close()
        return  # a write outside any block at stage 3 is to an empty tensor: test_torch_host_writes covers it
    for how in ("in place", "through p.data"):
        model, engine = build(stage)
        train_step(engine, 0)
        with zt.GatheredParameters([model.lin.bias], modifier_rank=ROOT):
            with torch.no_grad():
                model.lin.bias.fill_(1.0)
        if how == "in place":  # zero.torch sees it (the version counter)
            with torch.no_grad():
                model.lin.weight.mul_(2.0)
            needles = ["'lin.weight'", "written after zt.initialize"]
        else:  # only libzero sees it at the boundary (the host-owned tensor, or with libzero storage its own copy)
            model.lin.weight.data[0, 0] = 9.0
            needles = ["'lin.weight'", "zero_step"]
        expect_error(lambda: train_step(engine, 1), zero.ZeroError, needles, "%s: a write %s after the block"
                     % (stage, how), status="ZERO_ERR_STATE")
        engine.close()


def refusals(stage):
    model, engine = build(stage, gas=2)
    params = [model.lin.bias]
    ran = []

    def block(rank):
        with zt.GatheredParameters(params, modifier_rank=rank):
            ran.append(rank)
    for bad in (WORLD, -1):
        expect_error(lambda: block(bad), ValueError, ["modifier_rank=%d" % bad, "'lin.bias'", "0 to %d" % (WORLD - 1)],
                     "%s: modifier_rank %d" % (stage, bad))
    expect_error(lambda: block(1.0), TypeError, ["modifier_rank must be an int"], "%s: modifier_rank 1.0" % stage)
    # a window of gradient_accumulation_steps 2: between backward and step, and between its micro-steps
    ids, y = shard(0, RANK)
    engine.backward(loss_of(engine(ids), y))
    expect_error(lambda: block(0), zero.ZeroError, ["inside an accumulation window", "after the engine.step()"],
                 "%s: a block between backward and step" % stage, status="ZERO_ERR_STATE")
    r = engine.step()
    check(not r.boundary, "%s: the first micro-step ended the window" % stage)
    expect_error(lambda: block(0), zero.ZeroError, ["inside an accumulation window", "micro-step 1"],
                 "%s: a block inside a window" % stage, status="ZERO_ERR_STATE")
    check(not ran, "%s: a refused block's code ran" % stage)
    ids, y = shard(1, RANK)
    engine.backward(loss_of(engine(ids), y))
    check(engine.step().taken, "%s: the window's step after the refusals" % stage)
    block(0)  # between windows: fine
    check(ran == [0], "%s: the block after the window did not run" % stage)
    # parameters of no engine: refused with a modifier, left alone read-only, as DeepSpeed leaves them
    other = nn.Linear(2, 2)
    expect_error(lambda: zt.GatheredParameters([other.weight, model.lin.bias], modifier_rank=0), ValueError,
                 ["no live zero.torch engine", "a tensor of shape (2, 2)"], "%s: a foreign parameter" % stage)
    expect_error(lambda: engine.gathered_parameters([other.bias]).__enter__(), ValueError,
                 ["not trained by this engine"], "%s: engine block of a foreign parameter" % stage)
    with zt.GatheredParameters([other.weight]):
        pass
    with zt.GatheredParameters(model.parameters(), enabled=False):
        check(stage != "stage3" or model.lin.weight.numel() == 0, "%s: enabled=False gathered" % stage)
    try:
        with zt.GatheredParameters(model.parameters()):  # read-only, every parameter
            check(model.lin.weight.numel() == 64, "%s: a read-only block is not full" % stage)
        for s in range(2, 4):
            train_step(engine, s)
    except zero.ZeroError as ex:
        check(False, "%s: training after the refusals: %s" % (stage, ex))
    engine.close()


def raising(stage):
    """A modifier block that raises on one rank -- the modifier rank, or
    another -- leaves every rank at once: that rank with its own exception,
    the others with a ZeroError naming it (before, they waited in the write
    until comm_timeout, here 60 s, 1800 s by default), nothing written; the
    run then trains on bitwise as one without the block."""
    cfg = cfg_of(stage)
    cfg["comm_timeout"] = 60
    kw = dict(plugin="offload" if stage == "offload" else None,
              param_storage="libzero" if stage.endswith("-libzero") else "host", log=log)
    model = make_model()
    engine, _, _, _ = zt.initialize(model, cfg, **kw)
    ref, _, _, _ = zt.initialize(make_model(), cfg, **kw)
    try:
        train_step(engine, 0)
        train_step(ref, 0)
        for culprit in (ROOT, (ROOT + 1) % WORLD):
            def block():
                with zt.GatheredParameters([model.lin.bias, model.emb.weight], modifier_rank=ROOT):
                    if RANK == culprit:
                        raise RuntimeError("the block failed on rank %d" % RANK)
            t0 = time.monotonic()
            what = "%s: a block raising on rank %d" % (stage, culprit)
            if RANK == culprit:
                expect_error(block, RuntimeError, ["the block failed on rank %d" % RANK], what)
            else:
                expect_error(block, zero.ZeroError, ["rank %d refused the call" % culprit, "raised an exception"],
                             what)
            took = time.monotonic() - t0
            check(took < 20, "%s: rank %d left after %.1f s" % (what, RANK, took))
        a, b = state(engine), state(ref)
        check(all(torch.equal(a[n], b[n]) for n in a), "%s: a refused block changed a parameter" % stage)
        train_step(engine, 1)
        train_step(ref, 1)
        a, b = state(engine), state(ref)
        check(all(torch.equal(a[n], b[n]) for n in a), "%s: the step after a refused block is not bitwise the run "
              "without it" % stage)
    except zero.ZeroError as ex:
        check(False, "%s: %s" % (stage, ex))
    finally:
        engine.close()
        ref.close()


def experts(stage):
    """An expert parameter (DeepSpeed's marks, expert-parallel size E =
    WORLD: every rank holds its own expert, a group of one rank): its
    modifier rank is its place in that group, so modifier_rank 0 keeps
    every rank's own value and modifier_rank 1 is refused, naming the
    expert group; the dense parameters of the same block take rank 0's.
    Stage 2, and (1.12) stage 3, whose expert is then its own shard."""
    model = make_model()
    for p in model.out.parameters():
        p.allreduce = False
        p.group_name = "ep_size_%d" % WORLD
    model, engine = build(stage, model=model)
    try:
        train_step(engine, 0)
        expect_error(lambda: zt.GatheredParameters([model.out.bias], modifier_rank=1).__enter__(), ValueError,
                     ["'out.bias'", "expert-data-parallel group", "0 to 0"], "an expert parameter, modifier_rank 1")
        with zt.GatheredParameters([model.out.bias, model.lin.bias], modifier_rank=0):
            with torch.no_grad():
                model.out.bias.fill_(float(RANK))
                model.lin.bias.fill_(float(RANK))
        got = state(engine)
        check(torch.equal(got["out.bias"], torch.full((4,), float(RANK))) and
              torch.equal(got["lin.bias"], torch.zeros(8)), "experts (%s): out.bias %s (this rank's own expected), "
              "lin.bias %s (rank 0's expected)" % (stage, got["out.bias"], got["lin.bias"]))
        check(train_step(engine, 1).taken, "experts (%s): the step after the block" % stage)
    except zero.ZeroError as ex:
        check(False, "experts (%s): %s" % (stage, ex))
    finally:
        engine.close()


def main():
    if WORLD < 2:
        print("test_torch_gathered_write needs 2 or more ranks (modifier rank %d)" % ROOT, file=sys.stderr)
        return 2
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + int(JOB) % 20000))
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    if RANK == 0:
        print("N=%d: a GatheredParameters(modifier_rank=%d) block after 2 steps, 2 steps after it" % (WORLD, ROOT))
    compare_all()
    for stage in STAGES:
        engine_form(stage)
        outside_writes(stage)
        refusals(stage)
        raising(stage)
    for stage in ("stage2", "stage3"):
        experts(stage)
    check(not LOST, "a parameter's gradient stopped reaching libzero after a block: %s" % LOST[:1])
    dist.destroy_process_group()
    if failures:
        print("rank %d: %d failure(s)" % (RANK, len(failures)), file=sys.stderr)
        return 1
    if RANK == 0:
        print("test_torch_gathered_write: every stage (fp32, bf16) writes rank %d's values and ends bitwise equal "
              "to stage 0 (fp32 within %.0e of torch); refusals: ok" % (ROOT, TOL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
