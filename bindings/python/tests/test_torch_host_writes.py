"""zero.torch refuses the host's changes to parameters that libzero would lose.

libzero keeps its own copy of every parameter for the optimizer and writes the
model's tensors from it at each step (host-owned stages 0-2 and offload; with
param_storage="libzero" the tensors are its memory, with a separate fp32
master under bf16; stage 3 gathers scratch copies).  Before 1.7.3 a change
the host made after zt.initialize was lost at the next step without a word:
model.load_state_dict() (measured: every plugin but fp32 stage 2 with
libzero storage went back to the old values), an in-place update under
no_grad, a second torch optimizer stepping the same tensors, a write inside
engine.gathered_parameters() at stage 3; and a parameter frozen after
initialize went on moving (momentum, weight decay); and
torch.nn.utils.clip_grad_norm_ between backward and step clipped nothing
(the gradients live in libzero) and returned 0; with fp16, loss.backward()
instead of engine.backward(loss) trained on gradients divided by a loss
scale they were never multiplied by.  model.double() at stage
3 made zero.torch view libzero's fp32 memory as float64 (reading past it).

Checked here, for stage 0, 1 (bf16), 2, 2 with libzero storage, offload and
stage 3, under mpirun: each of these raises zero.ZeroError ZERO_ERR_STATE at
the next step (save() too; stage 3's conversion at the next forward, its
gathered write at the block's end), naming the parameter and what to do;
close() still works and leaves the model its values; and a run that only
trains, saves, loads and trains again raises nothing (no false alarm).
torch.nn.utils.clip_grad_norm_ / clip_grad_value_ on the engine's
parameters raise ZERO_ERR_UNSUPPORTED naming the config key (also
clip_grad_norm_ imported by name before zero.torch was), an enabled AMP
GradScaler's unscale_/step on the engine's optimizer ZERO_ERR_UNSUPPORTED
naming the fp16 config (torch's "No inf checks were recorded"),
DistributedDataParallel around the engine's model ZERO_ERR_UNSUPPORTED at
its construction, while another
model's parameters clip as in torch.  fp16's loss.backward() is refused in
the gradient hook (stage 2 and 3).
Usage: mpirun -np N python3 test_torch_host_writes.py"""
import os
import shutil
import sys

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.nn as nn
# the habit the guard must reach too: the function imported by name before
# zero.torch installs its guard (checked in clipping())
from torch.nn.utils import clip_grad_norm_

import zero
import zero.torch as zt

JOB = os.environ.get("OMPI_MCA_ess_base_jobid", str(os.getpid()))
VARIANTS = [  # (name, stage, plugin, param_storage, bf16)
    ("stage0", 0, None, "host", False),
    ("stage1-bf16", 1, None, "host", True),
    ("stage2", 2, None, "host", False),
    ("stage2-libzero", 2, None, "libzero", False),
    ("stage1-libzero-bf16", 1, None, "libzero", True),
    ("offload", 2, "offload", "host", False),
    ("stage3", 3, None, "host", False),
]


def build(variant):
    name, stage, plugin, storage, bf16 = variant
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    cfg = {"train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
           "zero_optimization": {"stage": stage}}
    if plugin == "offload":
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if bf16:
        cfg["bf16"] = {"enabled": True}
    engine, opt, _, _ = zt.initialize(model, cfg, plugin=plugin, param_storage=storage)
    return model, engine, opt


def train_step(model, engine, k):
    g = torch.Generator().manual_seed(1000 * RANK + k)
    x = torch.randn(2, 8, generator=g).to(next(p for p in model.parameters()).dtype
                                          if engine.stage != 3 else engine.dtype)
    loss = engine(x).float().square().mean()
    engine.backward(loss)
    return engine.step()


def expect_state_error(fn, needles, what):
    """fn() must raise ZERO_ERR_STATE whose message holds every needle."""
    try:
        fn()
    except zero.ZeroError as ex:
        check(ex.status_name == "ZERO_ERR_STATE", "%s: %s, not ZERO_ERR_STATE" % (what, ex.status_name))
        missing = [n for n in needles if n not in ex.message]
        check(not missing, "%s: message lacks %s: %s" % (what, missing, ex.message))
        return ex
    check(False, "%s: no error" % what)
    return None


def case(variant, action, needles, when="step"):
    """Train a step, do `action(model, engine)`, then expect the refusal at
    `when` ("step", "forward", "action": the action itself); close() must
    still work and leave every parameter finite."""
    name = variant[0]
    model, engine, _ = build(variant)
    train_step(model, engine, 0)
    what = "%s %s" % (name, action.__name__)
    if when == "action":
        expect_state_error(lambda: action(model, engine), needles, what)
    else:
        action(model, engine)
        if when == "forward":
            expect_state_error(lambda: engine(torch.randn(2, 8, dtype=torch.float64)), needles, what)
        else:
            expect_state_error(lambda: train_step(model, engine, 1), needles, what)
    try:
        engine.close()
    except zero.ZeroError as ex:
        check(False, "%s: close() after the refusal: %s" % (what, ex))
    check(all(p.numel() > 0 and torch.isfinite(p).all() for p in model.parameters()),
          "%s: the model's parameters after close() are empty or not finite" % what)
    return model


def load_state_dict(model, engine):
    model.load_state_dict({k: torch.full_like(v, 0.5) for k, v in model.state_dict().items()})


def inplace_write(model, engine):
    with torch.no_grad():
        model[0].weight.mul_(2.0)


def second_optimizer(model, engine):
    params = [p for p in model.parameters()]
    for p in params:
        p.grad = torch.ones_like(p)
    torch.optim.SGD(params, lr=0.1).step()
    for p in params:
        p.grad = None


def convert(model, engine):
    model.double()


def freeze(model, engine):
    model[0].weight.requires_grad_(False)


def gathered_write(model, engine):
    with engine.gathered_parameters() as ps:
        with torch.no_grad():
            ps[0].fill_(0.5)


def save_after_write(model, engine):
    inplace_write(model, engine)
    engine.save(ckdir("refused"))


def ckdir(tag):
    return os.path.join(os.environ.get("TMPDIR", "/tmp"), "zero-host-writes-%s-%s" % (JOB, tag))


def no_false_alarm(variant):
    """Train, save, train, load, train, backward, load, train,
    gathered_parameters (read only), eval: nothing raises, and the loaded run
    steps like the saved one."""
    name = variant[0]
    model, engine, _ = build(variant)
    d = ckdir(name)
    try:
        for k in range(2):
            train_step(model, engine, k)
        engine.save(d)
        r1 = train_step(model, engine, 2)
        engine.load(d)
        r2 = train_step(model, engine, 2)
        check(r1.grad_norm == r2.grad_norm, "%s: after load the step's grad norm %r, the saved run's %r"
              % (name, r2.grad_norm, r1.grad_norm))
        # (1.7.5) a load after a backward without its step (an exception
        # between them): the load drops that micro-step; the next backward is
        # not "a second gradient", and the step is the saved run's again
        x = torch.randn(2, 8, generator=torch.Generator().manual_seed(77 + RANK))
        engine.backward(engine(x.to(next(p for p in model.parameters()).dtype if engine.stage != 3
                                    else engine.dtype)).float().square().mean())
        engine.load(d)
        r3 = train_step(model, engine, 2)
        check(r1.grad_norm == r3.grad_norm, "%s: after a load mid-micro-step the step's grad norm %r, the saved "
              "run's %r" % (name, r3.grad_norm, r1.grad_norm))
        with engine.gathered_parameters() as ps:
            total = sum(float(p.float().sum()) for p in ps)
        check(total == total, "%s: gathered values" % name)
        engine.eval()
        with torch.no_grad():
            engine(torch.randn(2, 8).to(engine.dtype))
        engine.train()
        train_step(model, engine, 3)
    except zero.ZeroError as ex:
        check(False, "%s: false alarm: %s" % (name, ex))
    finally:
        engine.close()
        if RANK == 0:
            shutil.rmtree(d, ignore_errors=True)


def clipping():
    """torch.nn.utils.clip_grad_norm_ / clip_grad_value_ on zero.torch's
    parameters: refused (torch would clip nothing: p.grad is None), the
    engine trains on; other models' parameters clip as in torch; after
    close() the guard lets the former parameters through."""
    model, engine, _ = build(VARIANTS[2])
    other = nn.Linear(8, 4)
    g = torch.Generator().manual_seed(5)
    loss = engine(torch.randn(2, 8, generator=g)).square().mean()
    engine.backward(loss)
    for how, fn, arg, needle in (("", torch.nn.utils.clip_grad_norm_, 1.0, "gradient_clipping"),
                                 ("", torch.nn.utils.clip_grad_value_, 0.1, "global norm only"),
                                 (" imported by name before", clip_grad_norm_, 1.0, "gradient_clipping")):
        try:
            fn(model.parameters(), arg)
            check(False, "%s%s on zero.torch's parameters: no error" % (fn.__name__, how))
        except zero.ZeroError as ex:
            check(ex.status_name == "ZERO_ERR_UNSUPPORTED" and needle in ex.message and "p.grad is None" in ex.message,
                  "%s%s: %s %s" % (fn.__name__, how, ex.status_name, ex.message))
    other(torch.randn(2, 8, generator=g)).square().sum().backward()
    before = other.weight.grad.clone()
    n = torch.nn.utils.clip_grad_norm_(other.parameters(), 1e-3)
    check(float(n) > 1e-3 and not torch.equal(before, other.weight.grad),
          "clip_grad_norm_ on another model: norm %s, gradient %s" % (float(n), "clipped" if not
                                                                      torch.equal(before, other.weight.grad)
                                                                      else "unchanged"))
    r = engine.step()
    check(r.taken, "the step after the refused clip was not taken")
    engine.close()
    try:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    except zero.ZeroError as ex:
        check(False, "clip_grad_norm_ after close(): %s" % ex)


def grad_scaler():
    """AMP's GradScaler given zero.torch's optimizer: an enabled one is
    refused at unscale_/step with ZERO_ERR_UNSUPPORTED naming the fp16 config
    (torch's own error was "No inf checks were recorded for this optimizer");
    a disabled one (as torch makes it without CUDA) only calls step()."""
    import warnings as w
    from torch.cuda.amp import GradScaler
    model, engine, opt = build(VARIANTS[2])
    g = torch.Generator().manual_seed(6)
    with w.catch_warnings():
        w.simplefilter("ignore")  # "GradScaler is enabled, but CUDA is not available"
        scaler = GradScaler(enabled=torch.cuda.is_available())
    engine.backward(engine(torch.randn(2, 8, generator=g)).square().mean())
    if not scaler.is_enabled():
        scaler.step(opt)  # disabled: plain optimizer.step()
        scaler.update()
        check(engine.micro_steps == 1, "a disabled GradScaler's step did not step the engine")
        engine.backward(engine(torch.randn(2, 8, generator=g)).square().mean())
        scaler._enabled = True  # what it is on a GPU machine (the guard answers before any CUDA call)
    for call in ("unscale_", "step"):
        try:
            getattr(scaler, call)(opt)
            check(False, "GradScaler.%s on zero.torch's optimizer: no error" % call)
        except zero.ZeroError as ex:
            check(ex.status_name == "ZERO_ERR_UNSUPPORTED" and ("GradScaler.%s" % call) in ex.message
                  and "\"fp16\"" in ex.message, "GradScaler.%s: %s %s" % (call, ex.status_name, ex.message))
    r = engine.step()
    check(r.taken, "the step after the refused GradScaler was not taken")
    engine.close()


def wrappers():
    """DistributedDataParallel around the engine's model is refused at its
    construction (before it needs a process group or touches a tensor);
    around another model it is torch's as before (here: no process group,
    so torch's own error)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    model, engine, _ = build(VARIANTS[2])
    try:
        DDP(model)
        check(False, "DistributedDataParallel around zero.torch's model: no error")
    except zero.ZeroError as ex:
        check(ex.status_name == "ZERO_ERR_UNSUPPORTED" and "DistributedDataParallel" in ex.message
              and "call the model (or the engine) directly" in ex.message,
              "DDP refusal: %s %s" % (ex.status_name, ex.message))
    try:
        DDP(nn.Linear(2, 2))
    except zero.ZeroError as ex:
        check(False, "DistributedDataParallel around another model refused by zero.torch: %s" % ex)
    except Exception:
        pass  # torch's own (no default process group here)
    check(train_step(model, engine, 0).taken, "training after the refused wrapper")
    engine.close()


class Elementwise(nn.Module):
    """fp16 on the CPU: torch 1.13 has no half matmul there, but mul and sum."""
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8) * 0.1)
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return (x * self.w).sum(-1) + self.b


def fp16_plain_backward():
    """fp16: loss.backward() instead of engine.backward(loss) skips the loss
    scale that libzero divides every gradient by (it trained on gradients
    65536x too small before 1.7.3): refused in the gradient hook."""
    for stage in (2, 3):
        torch.manual_seed(0)
        model = Elementwise()
        cfg = {"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": True},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.0}},
               "zero_optimization": {"stage": stage}}
        engine, _, _, _ = zt.initialize(model, cfg)
        x = torch.randn(4, 8).half()
        loss = engine(x).float().square().mean()
        engine.backward(loss)
        r = engine.step()
        check(r.grad_norm > 1e-3, "fp16 stage %d: engine.backward's grad norm %g" % (stage, r.grad_norm))
        loss = engine(x).float().square().mean()
        expect_state_error(lambda: loss.backward(), ["engine.backward(loss)", "loss scal"],
                           "fp16 stage %d loss.backward()" % stage)
        engine.close()


def two_backwards():
    """Torch-style accumulation (two backward passes, one step) is libzero's
    ZERO_ERR_DUPLICATE; zero.torch's message says what to do instead."""
    model, engine, _ = build(VARIANTS[2])
    try:
        for _ in range(2):
            engine.backward(engine(torch.randn(2, 8)).square().mean())
        check(False, "two backward passes before one step: no error")
    except zero.ZeroError as ex:
        check(ex.status_name == "ZERO_ERR_DUPLICATE" and "gradient_accumulation_steps" in ex.message,
              "two backward passes: %s %s" % (ex.status_name, ex.message))
    engine.close()


def main():
    two_backwards()
    fp16_plain_backward()
    clipping()
    grad_scaler()
    wrappers()
    for v in VARIANTS:
        stage = v[1]
        no_false_alarm(v)
        if stage != 3:  # stage 3's tensors are empty between modules: torch itself refuses load_state_dict
            case(v, load_state_dict, ["'0.weight'", "written after zt.initialize", "load weights before"])
            case(v, inplace_write, ["'0.weight'", "written after zt.initialize"])
            case(v, second_optimizer, ["'0.weight'", "'2.bias'", "another optimizer's step"])
            case(v, convert, ["'0.weight'", ".double()", "before zt.initialize"])
            case(v, save_after_write, ["'0.weight'", "written after"], when="action")
        else:
            case(v, gathered_write, ["'0.weight'", "written while gathered"], when="action")
            m = case(v, convert, ["'0.weight'", "converted or moved", "torch.float64"], when="forward")
            check(all(p.dtype == torch.float64 for p in m.parameters()),
                  "stage3 convert: close() did not leave the parameters in the dtype asked for")
        case(v, freeze, ["'0.weight'", "no longer require a gradient", "freeze parameters before"])
    if failures:
        print("rank %d: %d failure(s)" % (RANK, len(failures)), file=sys.stderr)
        return 1
    if RANK == 0:
        print("N=%d: the host's writes, conversions and freezes after initialize are refused with "
              "ZERO_ERR_STATE (%s); no false alarm in train/save/load/eval; torch's gradient clipping refused "
              "on them: ok"
              % (WORLD, ", ".join(v[0] for v in VARIANTS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
