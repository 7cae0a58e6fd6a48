"""zero.torch honours PyTorch habits (issue 34 items 3, 4, 6), under mpirun -np N.

* Torch lr schedulers (StepLR, LambdaLR, CosineAnnealingLR, OneCycleLR) on
  engine.optimizer: the lr libzero used at every step (StepResult.lr) equals
  the lr the same scheduler gives a plain torch optimizer at that step; with
  OneCycleLR on AdamW the cycled beta1 reaches libzero too (the parameters
  follow torch's AdamW driven by the same scheduler).
* initialize(optimizer=torch optimizer): SGD with momentum / nesterov and
  two param groups (own lr and weight decay each) under a StepLR trains like
  torch.optim.SGD; Adam (L2 decay) and AdamW like theirs; what libzero would
  run differently is refused with ValueError naming the reason; DeepSpeed
  arguments zero.torch does not take are refused with TypeError.
* AdamW from a config without weight_decay: one warning naming the key; a
  translated torch AdamW carries torch's 0.01.
Usage: mpirun -np N python3 test_torch_optim.py [steps]"""
import math
import sys
import warnings

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.nn as nn
from torch.optim import lr_scheduler as S

import zero.torch as zt

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
MB = 4


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def batch(step):
    """The global batch of a step (every rank makes all of it) and this rank's shard."""
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(MB * WORLD, 6, generator=g)
    y = torch.randn(MB * WORLD, 3, generator=g)
    return (x, y), (x[RANK * MB:(RANK + 1) * MB], y[RANK * MB:(RANK + 1) * MB])


def config(opt=None):
    c = {"train_micro_batch_size_per_gpu": MB, "zero_optimization": {"stage": 2}}
    if opt is not None:
        c["optimizer"] = opt
    return c


SCHEDULERS = {
    "StepLR": lambda o: S.StepLR(o, step_size=3, gamma=0.5),
    "LambdaLR": lambda o: S.LambdaLR(o, lambda s: 1.0 / (1.0 + 0.5 * s)),
    "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, T_max=STEPS, eta_min=1e-4),
    "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=2e-2, total_steps=STEPS),
}


def reference(make_opt, make_sched):
    """Single-process torch on the global batch: lr used by every step, final params."""
    model = make_model()
    opt = make_opt(model)
    sched = make_sched(opt) if make_sched else None
    lrs = []
    for s in range(STEPS):
        (x, y), _ = batch(s)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        if sched:
            sched.step()
    return lrs, [p.detach().clone() for p in model.parameters()]


def train(cfg, make_sched, optimizer=None):
    model = make_model()
    engine, opt, _, _ = zt.initialize(model, cfg, optimizer=optimizer(model) if optimizer else None)
    check(isinstance(opt, torch.optim.Optimizer) and opt is engine.optimizer, "optimizer is a torch Optimizer")
    sched = make_sched(opt) if make_sched else None
    lrs, used = [], []
    for s in range(STEPS):
        _, (x, y) = batch(s)
        engine.backward(nn.functional.mse_loss(engine(x), y))
        lrs.append([g["lr"] for g in opt.param_groups])
        r = engine.step()
        used.append(r.lr)
        if sched:
            sched.step()
    out = [p.detach().clone() for p in model.parameters()]
    engine.close()
    return lrs, used, out


def rel(a, b):
    num = sum(float(((x.double() - y.double()) ** 2).sum()) for x, y in zip(a, b)) ** 0.5
    return num / sum(float((y.double() ** 2).sum()) for y in b) ** 0.5


def close_lr(a, b):  # libzero steps in fp32: the lr it reports is the fp32 rounding of torch's
    return abs(a - b) <= 1e-7 * abs(b) + 1e-12


def schedulers():
    adamw = {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}}
    for name, mk in SCHEDULERS.items():
        ref_lrs, ref_p = reference(lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01), mk)
        lrs, used, got = train(config(adamw), mk)
        bad = [s for s in range(STEPS) if not (close_lr(used[s], ref_lrs[s][0]) and close_lr(lrs[s][0],
                                                                                            ref_lrs[s][0]))]
        check(not bad, "%s: libzero's lr differs from torch's at steps %s (libzero %s, torch %s)"
              % (name, bad, [used[s] for s in bad[:3]], [ref_lrs[s][0] for s in bad[:3]]))
        check(len(set(ref_lrs[s][0] for s in range(STEPS))) > 2, "%s: the lr changes" % name)
        d = rel(got, ref_p)
        if RANK == 0:
            print("N=%d %-17s lr of %d steps = torch's; params vs torch AdamW rel %.2e" % (WORLD, name, STEPS, d))
        # beta1 cycled by OneCycleLR reaches libzero: the parameters follow torch (fp32 rounding of
        # the Adam coefficients leaves ~1e-6 here; beta1 left at 0.9 lands ~7e-2 away)
        check(d <= 1e-5, "%s: params rel %.3e from torch AdamW" % (name, d))


def translated():
    def sgd(m):
        return torch.optim.SGD([{"params": m[0].parameters(), "lr": 5e-2, "weight_decay": 1e-3},
                                {"params": m[2].parameters()}], lr=2e-2, momentum=0.9, nesterov=True)
    cases = [("SGD 2 groups, nesterov, StepLR", sgd, SCHEDULERS["StepLR"]),
             ("Adam (L2 decay)", lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.05), None),
             ("AdamW betas/eps", lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, betas=(0.8, 0.99), eps=1e-6),
              SCHEDULERS["CosineAnnealingLR"])]
    for what, mk_opt, mk_sched in cases:
        ref_lrs, ref_p = reference(mk_opt, mk_sched)
        lrs, used, got = train(config(), mk_sched, optimizer=mk_opt)
        check(all(close_lr(a, b) for la, lb in zip(lrs, ref_lrs) for a, b in zip(la, lb)),
              "%s: param_groups' lr differ from torch's" % what)
        check(all(close_lr(used[s], ref_lrs[s][0]) for s in range(STEPS)), "%s: libzero's lr differs" % what)
        d = rel(got, ref_p)
        if RANK == 0:
            print("N=%d translated %-30s params vs torch rel %.2e" % (WORLD, what, d))
        check(d <= (1e-6 if what.startswith("SGD") else 1e-5), "%s: params rel %.3e from torch" % (what, d))


def refusals():
    def expect(fn, exc, needle, what):
        try:
            fn()
        except exc as ex:
            check(needle in str(ex), "%s: message %r lacks %r" % (what, str(ex), needle))
            return
        except Exception as ex:  # noqa: BLE001 - reported as a failure
            check(False, "%s: %s %r instead of %s" % (what, type(ex).__name__, ex, exc.__name__))
            return
        check(False, "%s: no %s" % (what, exc.__name__))

    m = make_model()
    init = zt.initialize
    expect(lambda: init(m, config(), optimizer=torch.optim.Adagrad(m.parameters())), ValueError, "Adagrad",
           "unsupported type")
    expect(lambda: init(m, config(), optimizer=torch.optim.AdamW(m.parameters(), amsgrad=True)), ValueError,
           "amsgrad", "amsgrad")
    expect(lambda: init(m, config(), optimizer=torch.optim.Adam(m.parameters(), maximize=True)), ValueError,
           "maximize", "maximize")
    expect(lambda: init(m, config(), optimizer=torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9,
                                                                 dampening=0.1)), ValueError, "dampening", "dampening")
    expect(lambda: init(m, config(), optimizer=torch.optim.SGD(
        [{"params": m[0].parameters(), "momentum": 0.5}, {"params": m[2].parameters()}], lr=0.1, momentum=0.9)),
        ValueError, "momentum", "momentum per group")
    expect(lambda: init(m, config({"type": "Adam", "params": {"lr": 1e-3}}),
                        optimizer=torch.optim.SGD(m.parameters(), lr=0.1)), ValueError, "disagree", "type conflict")
    expect(lambda: init(m, config({"type": "AdamW", "params": {"lr": 1e-3}}),
                        optimizer=torch.optim.AdamW(m.parameters(), lr=1e-2)), ValueError, "params.lr",
           "lr conflict")
    expect(lambda: init(m, config(), optimizer=torch.optim.AdamW(m.parameters()), model_parameters=m.parameters()),
           ValueError, "not both", "model_parameters and optimizer")
    expect(lambda: init(m, config(), training_data=[1]), TypeError, "training_data", "training_data")
    expect(lambda: init(m, config(), lr_scheduler=object()), TypeError, "lr_scheduler", "lr_scheduler")
    used = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(torch.ones(1, 6)).sum().backward()
    used.step()
    m.zero_grad(set_to_none=True)
    expect(lambda: init(m, config(), optimizer=used), ValueError, "already stepped", "stepped optimizer")

    # agreeing config and torch optimizer: accepted
    m2 = make_model()
    e, opt, _, _ = init(m2, config({"type": "adamw", "params": {"lr": 1e-2}}),
                        optimizer=torch.optim.AdamW(m2.parameters(), lr=1e-2))
    check(e.config["optimizer"]["params"]["weight_decay"] == 0.01, "translated AdamW carries torch's weight decay")
    expect(lambda: opt.add_param_group({"params": [torch.zeros(1, requires_grad=True)]}), ValueError, "fixed",
           "add_param_group")
    e.close()
    # SGD's momentum is fixed in libzero: a OneCycleLR cycling it is refused at the step, on every rank
    m3 = make_model()
    e, opt, _, _ = init(m3, config(), optimizer=torch.optim.SGD(m3.parameters(), lr=1e-2, momentum=0.9))
    S.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    _, (x, y) = batch(0)
    e.backward(nn.functional.mse_loss(e(x), y))
    expect(e.step, ValueError, "cycle_momentum=False", "cycled SGD momentum")
    e.close()


def weight_decay_note():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        e, _, _, _ = zt.initialize(make_model(), config({"type": "AdamW", "params": {"lr": 1e-3}}))
        e.close()
        e, _, _, _ = zt.initialize(make_model(), config({"type": "AdamW", "params": {"lr": 1e-3}}))
        e.close()
    notes = [str(x.message) for x in w if "weight_decay" in str(x.message)]
    check(len(notes) == (1 if RANK == 0 else 0), "AdamW without weight_decay: %d notes on rank %d: %s"
          % (len(notes), RANK, notes))
    check(all("0.01" in n for n in notes), "the note names torch's default")


def main():
    schedulers()
    translated()
    refusals()
    weight_decay_note()
    if failures:
        return 1
    if RANK == 0:
        print("test_torch_optim: all checks passed on %d ranks" % WORLD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
