"""zero.torch stage 3: memory between forward and backward, recomputed forwards.

1. Each gathered parameter is freed after its module's forward.

Autograd saves what backward needs: nn.Linear saves weight.t(), a view of
the weight's gathered copy, not the parameter.  Emptying the parameter in the
module's forward hook then frees nothing, and at the end of forward the
torch side holds every gathered copy: the whole model, which stage 3 is there
to avoid (2026-11-28: stage 3's torch-side peak was 356 MiB above stage 2's
on a 350 MiB model).  zero.torch saves such views as references to the
parameter and rebuilds them from the copy backward gathers again.

Checked here, at every rank, with a weight-heavy model (Linear blocks, a
LayerNorm whose weight autograd saves directly, an embedding tied to the
output head), several steps of stage 3 under mpirun:
  * memory kept from the start of forward to its end is below a quarter of
    the model (in practice a few MiB), and the peak of forward + backward
    above the start below half of it, on every step after the first two
    (which also pay for first touches: libzero's gather trace and prefetch
    pool, MPI's buffers); on the CPU what libzero's own accounting says it
    allocated meanwhile is taken off;
  * control: the same run with the references off (ZeroEngine.
    SAVED_PARAM_REFS = False) keeps at least three quarters of the model,
    so the measurement sees what it checks;
  * both runs give the same losses and final parameters, bitwise;
  * close() takes its wrapper off the model's forward;
  * libzero logs no warning (close() gathers in a phase of its own, not
    against the training order stage 3 recorded).
2. torch.utils.checkpoint, reentrant and not: the checkpointed blocks'
   forward runs again inside backward, where its module hooks must leave
   the parameters gathered (the non-reentrant recompute failed with "The
   size of tensor a (0) must match ..." before 1.7.3); losses and final
   parameters bitwise equal to stage 0's on the same run.
3. model.train() / model.eval() (not engine.train()/eval()) name stage 3's
   gather phase: epochs with eval forwards between them log no warning (stage
   3 warned "gather order differs" and re-recorded every epoch before 1.7.3)
   and train bitwise as epochs without them; a forward inside
   gathered_parameters() leaves the parameters gathered for the block.
4. model.state_dict() outside engine.gathered_parameters() is refused
   (ZERO_ERR_STATE; it held the empty tensors, so torch.save wrote no
   weights); inside, a plain model loaded from it computes what the engine
   computes, bitwise.
5. Copies of the module (copy.deepcopy for an EMA or eval copy,
   torch.save(model), copy.copy): outside gathered_parameters() refused with
   ZERO_ERR_STATE naming the block (deepcopy failed inside ctypes and
   torch.save on a local hook function before 1.7.4, neither saying why);
   inside it a plain module -- full values, tied weights still tied, no
   forward hooks, no wrapper -- that computes what the engine computes,
   bitwise, deepcopy and torch.save/torch.load alike.  Training with such
   copies taken (and the copy trained on its own) ends bitwise where
   training without them does; stage 2's deepcopy, which needs no block,
   too (its copy's backward does not reach libzero).
Memory: on the CPU the process's resident set (glibc told to mmap every
block over 64 KiB, so that a freed copy leaves the resident set; the peak
through /proc/self/clear_refs), on CUDA torch.cuda.memory_allocated() and
max_memory_allocated().  Exits 77 (skipped) without torch, or with
--device cuda where there is no usable CUDA.
Usage: mpirun -np N python3 test_torch_stage3.py [--device cpu|cuda] [steps]"""
import copy
import ctypes
import gc
import io
import sys

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

import zero
import zero.torch as zt

ARGS = sys.argv[1:]
DEVICE = "cpu"
if "--device" in ARGS:
    k = ARGS.index("--device")
    DEVICE = ARGS[k + 1]
    del ARGS[k:k + 2]
STEPS = int(ARGS[0]) if ARGS else 5
SETTLED = 2  # steps 0-1 also pay for first touches (libzero's gather trace and prefetch pool, MPI's buffers)
GPU = DEVICE != "cpu"
MIB = 1024.0 * 1024.0
D, LAYERS, VOCAB, SEQ = 512, 6, 512, 8


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        # registered in another order than forward uses them: a gather of every
        # parameter in registration order (close()) is not the training order
        self.up = nn.Linear(d, 4 * d)  # linear saves weight.t() (a view of the gathered copy)
        self.down = nn.Linear(4 * d, d)
        self.ln = nn.LayerNorm(d)  # layer_norm saves the weight itself (the parameter)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.ln(x))))


class Net(nn.Module):
    def __init__(self, d=D, layers=LAYERS, checkpoint=None):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.head.weight = self.emb.weight  # tied: one parameter, two modules
        self.checkpoint = checkpoint  # None, "reentrant", "non-reentrant"

    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            if self.checkpoint is None:
                x = b(x)
            else:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=self.checkpoint == "reentrant")
        return self.head(x)


# ---------------------------------------------------------------- memory probes
if GPU:
    if not torch.cuda.is_available():
        print("torch %s has no usable CUDA: skipped" % torch.__version__)
        sys.exit(77)
    dev = torch.device("cuda", RANK % torch.cuda.device_count())
    torch.cuda.set_device(dev)

    def now():
        torch.cuda.synchronize(dev)
        return torch.cuda.memory_allocated(dev)

    def reset_peak():
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        return True

    def peak():
        torch.cuda.synchronize(dev)
        return torch.cuda.max_memory_allocated(dev)
else:
    dev = torch.device("cpu")
    try:  # glibc: mmap every block over 64 KiB (no dynamic threshold), so a freed copy leaves the RSS
        ctypes.CDLL(None).mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass

    def _status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def now():
        return _status("VmRSS")

    def reset_peak():
        try:  # "5": reset the peak resident set to the current one (Linux >= 4.0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def peak():
        return _status("VmHWM")


def libzero_bytes(engine):
    """What libzero holds now in the tiers that count in the probe: on the
    CPU all of them (its device arena is host memory too), on CUDA none
    (libzero allocates outside torch's allocator, which is what is probed)."""
    return 0 if GPU else sum(engine.memory_stats()["current_total"].values())


def libzero_peak_bytes(engine):
    return 0 if GPU else sum(engine.memory_stats()["peak_total"].values())


COMM = "mpi" if GPU and torch.cuda.device_count() < WORLD else "auto"  # ranks sharing a GPU: staged MPI
warnings = []


def log(level, rank, message):
    """libzero's log lines: ERROR (0) and WARN (1) printed and counted (abi/zero.h zero_log_level)."""
    if level <= 1:
        warnings.append(message)
        print("rank %d libzero: %s" % (RANK, message), file=sys.stderr)


def config(stage):
    return {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
            "zero_optimization": {"stage": stage}}


def train(refs):
    zt.ZeroEngine.SAVED_PARAM_REFS = refs
    torch.manual_seed(0)
    model = Net().to(dev)
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    engine, _, _, _ = zt.initialize(model, config(3), comm=COMM, log=log)
    check(engine.z.plugin == "stage3", "plugin %s, not stage3" % engine.z.plugin)
    check("forward" in model.__dict__, "refs=%s: the model's forward is not wrapped" % refs)
    g = torch.Generator().manual_seed(100 + RANK)
    kept, peaks, losses = [], [], []
    for s in range(STEPS):
        ids = torch.randint(0, VOCAB, (2, SEQ), generator=g).to(dev)
        gc.collect()
        lz0 = libzero_bytes(engine)
        start = now()
        has_peak = reset_peak()
        loss = engine(ids).float().square().mean()
        kept.append(now() - start - (libzero_bytes(engine) - lz0))
        engine.backward(loss)
        peaks.append(peak() - start - (libzero_peak_bytes(engine) - lz0) if has_peak else None)
        losses.append(loss.item())
        del loss
        engine.step()
    engine.close()
    check("forward" not in model.__dict__, "refs=%s: close() left the wrapper on the model's forward" % refs)
    final = [p.detach().cpu().clone() for p in model.parameters()]
    return model_bytes, kept, peaks, losses, final


def train_checkpointed(stage, mode):
    """Losses and final parameters of a small model whose blocks run under
    torch.utils.checkpoint (mode), stage `stage`."""
    torch.manual_seed(1)
    model = Net(d=32, layers=3, checkpoint=mode).to(dev)
    engine, _, _, _ = zt.initialize(model, config(stage), comm=COMM, log=log)
    g = torch.Generator().manual_seed(200 + RANK)
    losses = []
    for s in range(4):
        ids = torch.randint(0, VOCAB, (2, SEQ), generator=g).to(dev)
        loss = engine(ids).float().square().mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    engine.close()
    return losses, [p.detach().cpu().clone() for p in model.parameters()]


def state_dict():
    """model.state_dict() outside gathered_parameters() is refused (it held
    empty tensors: torch.save wrote a checkpoint without weights); inside, it
    is the full model: a plain torch copy loaded from it computes what the
    engine computes, bitwise; after close() it is plain torch again."""
    torch.manual_seed(2)
    model = Net(d=32, layers=2).to(dev)
    engine, _, _, _ = zt.initialize(model, config(3), comm=COMM, log=log)
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(300)).to(dev)
    loss = engine(ids).float().square().mean()
    engine.backward(loss)
    engine.step()
    try:
        model.state_dict()
        check(False, "state_dict() at stage 3 outside gathered_parameters(): no error")
    except zero.ZeroError as ex:
        check(ex.status_name == "ZERO_ERR_STATE" and "gathered_parameters" in ex.message,
              "state_dict() refusal: %s %s" % (ex.status_name, ex.message))
    with engine.gathered_parameters():
        sd = model.state_dict()
    engine.eval()
    with torch.no_grad():
        want = engine(ids)
    plain = Net(d=32, layers=2).to(dev)
    plain.load_state_dict(sd)
    with torch.no_grad():
        got = plain(ids)
    check(torch.equal(got, want), "a plain model loaded from the gathered state_dict computes otherwise than the engine")
    engine.close()
    after = model.state_dict()
    check(all(torch.equal(after[k], sd[k]) for k in sd), "state_dict() after close() differs from the gathered one")


def load_pickled(data):
    buf = io.BytesIO(data)
    try:
        return torch.load(buf, weights_only=False)  # torch >= 2.6 loads weights only by default
    except TypeError:  # a torch without the argument
        buf.seek(0)
        return torch.load(buf)


def plain_module(m, what):
    """m has none of zero.torch's forward hooks, wrapper or copy guards."""
    extra = [n for n, s in m.named_modules() for k in ("forward", "__deepcopy__", "__reduce_ex__")
             if k in s.__dict__ or s._forward_pre_hooks or s._forward_hooks]
    check(not extra, "%s: zero.torch's hooks or attributes on the copy (%s)" % (what, sorted(set(extra))[:4]))


def copies(stage, take):
    """Train 4 steps at `stage`; if `take`, after step 2 exercise the module
    copies (header, 5).  Returns the final parameters."""
    torch.manual_seed(4)
    model = Net(d=32, layers=2).to(dev)
    engine, _, _, _ = zt.initialize(model, config(stage), comm=COMM, log=log)
    g = torch.Generator().manual_seed(500 + RANK)
    ema = None
    for k in range(4):
        ids = torch.randint(0, VOCAB, (2, SEQ), generator=g).to(dev)
        engine.backward(engine(ids).float().square().mean())
        engine.step()
        if take and k == 1 and stage == 3:
            for what, fn in (("copy.deepcopy", lambda: copy.deepcopy(model)),
                             ("copy.deepcopy", lambda: copy.deepcopy(model.blocks[1])),
                             ("pickling", lambda: torch.save(model, io.BytesIO())),
                             ("pickling", lambda: copy.copy(model))):
                try:
                    fn()
                    check(False, "%s of a stage-3 module outside gathered_parameters(): no error" % what)
                except zero.ZeroError as ex:
                    check(ex.status_name == "ZERO_ERR_STATE" and what in ex.message
                          and "gathered_parameters" in ex.message, "%s refusal: %s %s" % (what, ex.status_name,
                                                                                           ex.message))
            with engine.gathered_parameters():
                ema = copy.deepcopy(model)
                block = copy.deepcopy(model.blocks[0])
                buf = io.BytesIO()
                torch.save(model, buf)
            loaded = load_pickled(buf.getvalue())
            for what, m in (("deepcopy", ema), ("torch.save", loaded), ("deepcopy of a block", block)):
                plain_module(m, what)
            for what, m in (("deepcopy", ema), ("torch.save", loaded)):
                check(m.head.weight is m.emb.weight, "%s: the tied weight is two tensors in the copy" % what)
            engine.eval()
            with torch.no_grad():
                want = engine(ids)
                x = torch.randn(2, SEQ, 32, generator=torch.Generator().manual_seed(7)).to(dev)
                with engine.gathered_parameters():
                    want_block = model.blocks[0](x)
                for what, got in (("deepcopy", ema(ids)), ("torch.save", loaded(ids)),
                                  ("deepcopy of a block", block(x))):
                    check(torch.equal(got, want_block if what.endswith("block") else want),
                          "%s: the copy computes otherwise than the engine" % what)
            engine.train()
        if take and k == 1 and stage != 3:
            ema = copy.deepcopy(model)  # no block needed: the model's tensors hold the full values
            plain_module(ema, "stage %d deepcopy" % stage)
        if ema is not None:  # the copy trains on its own: nothing of it reaches libzero
            ema(ids).float().square().mean().backward()
    engine.close()
    check("__deepcopy__" not in model.__dict__ and "__reduce_ex__" not in model.__dict__,
          "close() left the copy guards on the model")
    return [p.detach().cpu().clone() for p in model.parameters()]


def torch_modes(evaluate):
    """Epochs of training with the torch habits model.train() / model.eval()
    (not engine.train()/eval()) and, if `evaluate`, an eval forward under
    no_grad and one inside gathered_parameters() after each epoch.  Returns
    the final parameters."""
    torch.manual_seed(3)
    model = Net(d=32, layers=2).to(dev)
    engine, _, _, _ = zt.initialize(model, config(3), comm=COMM, log=log)
    g = torch.Generator().manual_seed(400 + RANK)
    for epoch in range(3):
        model.train()
        for k in range(3):
            ids = torch.randint(0, VOCAB, (2, SEQ), generator=g).to(dev)
            engine.backward(engine(ids).float().square().mean())
            engine.step()
        if evaluate:
            model.eval()
            with torch.no_grad():
                model(ids)
            with engine.gathered_parameters() as ps:
                with torch.no_grad():
                    model(ids)
                check(all(p.numel() > 0 for p in ps), "a forward inside gathered_parameters() emptied parameters")
    engine.close()
    return [p.detach().cpu().clone() for p in model.parameters()]


def checkpointing():
    for mode in ("reentrant", "non-reentrant"):
        try:
            got = train_checkpointed(3, mode)
        except RuntimeError as ex:
            check(False, "stage 3 under torch.utils.checkpoint (%s): %s" % (mode, str(ex).split("\n")[0]))
            continue
        ref = train_checkpointed(0, mode)
        check(got[0] == ref[0], "checkpoint (%s): stage 3 losses %s, stage 0 %s" % (mode, got[0], ref[0]))
        check(all(torch.equal(a, b) for a, b in zip(got[1], ref[1])),
              "checkpoint (%s): stage 3 final parameters differ from stage 0's (bitwise)" % mode)


def main():
    if STEPS <= SETTLED:
        raise SystemExit("steps must be over %d (the first %d settle)" % (SETTLED, SETTLED))
    model_bytes, kept, peaks, losses, final = train(True)
    _, kept_c, peaks_c, losses_c, final_c = train(False)
    kept_m, kept_cm = max(kept[SETTLED:]), min(kept_c[SETTLED:])
    fmt = lambda v: "%.1f" % (v / MIB)  # noqa: E731
    print("rank %d (%s, model %.1f MiB): kept after forward %s MiB (references) vs %s MiB (control); "
          "forward+backward peak over the start %s vs %s MiB"
          % (RANK, DEVICE, model_bytes / MIB, "/".join(fmt(k) for k in kept), "/".join(fmt(k) for k in kept_c),
             "/".join(fmt(p) if p is not None else "-" for p in peaks),
             "/".join(fmt(p) if p is not None else "-" for p in peaks_c)), flush=True)
    check(kept_m < 0.25 * model_bytes, "stage 3 keeps %s MiB of gathered parameters after forward (model %s MiB)"
          % (fmt(kept_m), fmt(model_bytes)))
    check(kept_cm > 0.75 * model_bytes, "control: without references forward kept only %s MiB of a %s MiB model: "
          "the measurement does not see gathered copies" % (fmt(kept_cm), fmt(model_bytes)))
    if peaks[-1] is not None and peaks_c[-1] is not None:
        check(max(peaks[SETTLED:]) < 0.5 * model_bytes, "stage 3 forward+backward peaks %s MiB over its start (model %s MiB)"
              % (fmt(max(peaks[SETTLED:])), fmt(model_bytes)))
    elif RANK == 0:
        print("peak not measured: /proc/self/clear_refs is not writable here")
    check(losses == losses_c, "losses differ with references: %s vs %s" % (losses, losses_c))
    check(len(final) == len(final_c) and all(torch.equal(a, b) for a, b in zip(final, final_c)),
          "final parameters differ (bitwise) with references")
    checkpointing()
    state_dict()
    check(all(torch.equal(a, b) for a, b in zip(torch_modes(True), torch_modes(False))),
          "model.eval() forwards between epochs changed the training (bitwise)")
    for stage in (2, 3):
        check(all(torch.equal(a, b) for a, b in zip(copies(stage, True), copies(stage, False))),
              "stage %d: copies of the module changed the training (bitwise)" % stage)
    check(not warnings, "libzero warned %d time(s) in training and close()" % len(warnings))
    if failures:
        print("rank %d: %d failure(s)" % (RANK, len(failures)), file=sys.stderr)
        return 1
    if RANK == 0:
        print("N=%d stage 3 frees gathered parameters after forward (%s), bitwise equal to the control, "
              "no libzero warning; under torch.utils.checkpoint (reentrant and not) bitwise equal to stage 0; module "
              "copies refused outside gathered_parameters(), plain and bitwise inside: ok"
              % (WORLD, DEVICE))
    return 0


if __name__ == "__main__":
    try:
        rc = main()
    except zero.ZeroError as ex:
        if GPU and "built without CUDA" in ex.message:
            print("libzero built without CUDA: skipped")
            sys.exit(77)
        raise
    sys.exit(rc)
