"""DeepSpeed's checkpoint calls on zero.torch (ABI 1.7 client state), under mpirun -np N.

* save_checkpoint(dir, client_state={step, the StepLR's state_dict, a torch
  RNG state, a tensor}) after 6 of 12 steps; a fresh engine's
  load_checkpoint(dir) returns (dir/step-6, that dict), the scheduler
  resumes from it, and the 6 remaining steps give the parameters and the
  lr of every step of the uninterrupted run, bitwise -- at the saving
  stage (2) and at stage 3 (a resharding load);
* save_16bit_model: one file with every parameter, equal to the gathered
  parameters, at stage 2 and 3;
* load_checkpoint(dir, tag="step-6") and a checkpoint saved by
  engine.save() (no client state: {});
* a directory without any checkpoint: (None, None) and one warning;
  a damaged one still raises;
* refused with ValueError naming the argument: save_latest=False,
  load_optimizer_states=False or load_lr_scheduler_states=False alone,
  load_module_strict=False;
* (1.9) load_checkpoint(load_module_only=True) into a fresh stage-3 engine
  (and load_optimizer_states=False with load_lr_scheduler_states=False into
  stage 1): the parameters at the save, global_steps 0, the client state;
  4 steps later the parameters of an engine whose module held those
  weights at initialize, bitwise (the optimizer started over);
* (1.8) get_fp32_state_dict_from_zero_checkpoint / load_state_dict_from_
  zero_checkpoint: the saved parameters, shaped as the module's, without
  an engine; a tied model's alias gets the weight;
* (1.8) a BatchNorm model's running statistics come back with the
  checkpoint (a fresh stage-3 engine from a stage-2 save), and load()
  returns the client state;
* DeepSpeed's engine accessors (ABI 1.7 zero_engine_info): global_steps
  (a checkpoint's right after load, before any step), the batch geometry,
  is_gradient_accumulation_boundary() over a window of 3, get_lr() from a
  config WarmupLR (the lr the next step reports) and from a torch
  scheduler, get_global_grad_norm(), was_step_applied() (False after a
  skipped step, and global_steps counting it as DeepSpeed does).
Usage: mpirun -np N python3 test_torch_ckpt.py DIR"""
import os
import shutil
import sys
import warnings

from torch_test_util import RANK, WORLD, check, failures  # exits 77 (skipped) without torch
import torch
import torch.nn as nn
from torch.optim import lr_scheduler as S

import zero.torch as zt

STEPS, SAVE_AT, MB = 12, 6, 4


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def shard(step):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(MB * WORLD, 6, generator=g)
    y = torch.randn(MB * WORLD, 3, generator=g)
    return x[RANK * MB:(RANK + 1) * MB], y[RANK * MB:(RANK + 1) * MB]


def config(stage):
    return {"train_micro_batch_size_per_gpu": MB, "zero_optimization": {"stage": stage},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}}}


def start(stage):
    engine, opt, _, _ = zt.initialize(make_model(), config(stage))
    return engine, S.StepLR(opt, step_size=2, gamma=0.5)


def run(engine, sched, first, last):
    lrs = []
    for s in range(first, last):
        x, y = shard(s)
        engine.backward(nn.functional.mse_loss(engine(x), y))
        lrs.append(engine.step().lr)
        sched.step()
    return lrs


def values(engine):
    with engine.gathered_parameters() as ps:
        return [p.detach().clone() for p in ps]


def module_only(ckdir, at_save):
    """load_module_only: the weights alone; the optimizer, step and schedule start over."""
    for stage, kw in ((3, {"load_module_only": True}),
                      (1, {"load_optimizer_states": False, "load_lr_scheduler_states": False})):
        engine, sched = start(stage)
        path, state = engine.load_checkpoint(ckdir, **kw)
        check(state.get("step") == SAVE_AT, "%s: client state %r" % (kw, state))
        got = values(engine)
        check(all(torch.equal(a, b) for a, b in zip(got, at_save)), "%s: not the parameters at the save" % kw)
        check(engine.global_steps == 0, "%s: global_steps %d after a module-only load" % (kw, engine.global_steps))
        run(engine, sched, 0, 4)
        after = values(engine)
        engine.close()
        model = make_model()
        with torch.no_grad():
            for p, v in zip(model.parameters(), at_save):
                p.copy_(v)
        ref, opt, _, _ = zt.initialize(model, config(stage))
        run(ref, S.StepLR(opt, step_size=2, gamma=0.5), 0, 4)
        want = values(ref)
        ref.close()
        same = all(torch.equal(a, b) for a, b in zip(after, want))
        check(same, "%s at stage %d: 4 steps after the load differ from a run initialized with those weights "
              "(max %.3e)" % (kw, stage, max(float((a - b).abs().max()) for a, b in zip(after, want))))
        if RANK == 0:
            print("N=%d stage %d load_checkpoint(%s): the saved weights, global_steps 0; 4 steps later bitwise a "
                  "run initialized with them: %s" % (WORLD, stage, ", ".join("%s=%s" % x for x in kw.items()), same))


def offline(ckdir, at_save, root):
    """get_fp32_state_dict_from_zero_checkpoint / load_state_dict_from_zero_checkpoint: the checkpoint's
    weights without an engine, shaped as the module's; a tied model's alias gets the weight."""
    if RANK == 0:
        sd = zt.get_fp32_state_dict_from_zero_checkpoint(ckdir)
        model = make_model()
        names = [n for n, _ in model.named_parameters()]
        check(list(sd) == names, "fp32 state dict keys %s" % list(sd))
        check(all(sd[n].shape == p.shape and torch.equal(sd[n], v) for (n, p), v in zip(model.named_parameters(),
                                                                                         at_save)),
              "the fp32 state dict is not the parameters at the save (shapes %s)" % [tuple(t.shape) for t in sd.values()])
        zt.load_state_dict_from_zero_checkpoint(model, ckdir)
        check(all(torch.equal(p.detach(), v) for p, v in zip(model.parameters(), at_save)),
              "load_state_dict_from_zero_checkpoint: the model's parameters are not the saved ones")
        print("N=%d offline: %d fp32 tensors from %s, shaped %s" % (WORLD, len(sd), os.path.basename(ckdir),
                                                                   [tuple(t.shape) for t in sd.values()]))
    # tied weights: registered once, both names get it
    def tied():
        torch.manual_seed(99)
        m = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 10, bias=False))
        m[1].weight = m[0].weight
        return m
    engine, _, _, _ = zt.initialize(tied(), config(2))
    for s in range(2):
        idx = torch.arange(MB) % 10 + s
        engine.backward(engine(idx % 10).pow(2).mean())
        engine.step()
    d = os.path.join(root, "tied")
    engine.save(d)
    want = values(engine)
    engine.close()
    if RANK == 0:
        m = zt.load_state_dict_from_zero_checkpoint(tied(), d)
        check(torch.equal(m[0].weight.detach(), want[0]) and m[1].weight is m[0].weight,
              "tied weights: the embedding and its tied head did not get the saved weight")
    # a checkpoint that is not there: a clear error
    try:
        zt.get_fp32_state_dict_from_zero_checkpoint(os.path.join(root, "empty"))
        check(False, "no checkpoint: no error")
    except ValueError as err:
        check("no checkpoint" in str(err), "no checkpoint: %s" % err)


def buffers(root):
    """(1.8) the module's persistent buffers go into the checkpoint: BatchNorm's running statistics
    after 3 training steps come back into a fresh stage-3 engine (rank 0's, as every rank gets them)."""
    def bn_model():
        torch.manual_seed(4321)
        return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))
    engine, _, _, _ = zt.initialize(bn_model(), config(2))
    for s in range(3):
        x, y = shard(s)
        engine.backward(nn.functional.mse_loss(engine(x), y))
        engine.step()
    bn = engine.module[1]
    saved = {k: getattr(bn, k).clone() for k in ("running_mean", "running_var", "num_batches_tracked")}
    d = os.path.join(root, "bn")
    engine.save(d, client_state={"k": 1})
    engine.close()
    fresh = bn_model()[1]
    engine, _, _, _ = zt.initialize(bn_model(), config(3))
    check(not torch.equal(engine.module[1].running_mean, saved["running_mean"]), "the fresh model's statistics differ")
    cs = engine.load(d)
    check(cs == {"k": 1}, "load() returns the client state: %r" % (cs,))
    bn = engine.module[1]
    check(int(bn.num_batches_tracked) == 3, "num_batches_tracked %d after the load" % int(bn.num_batches_tracked))
    if RANK == 0:  # each rank's statistics differ (its own data): the checkpoint holds rank 0's
        same = all(torch.equal(getattr(bn, k), v) for k, v in saved.items())
        check(same, "BatchNorm's running statistics did not come back (mean %s, saved %s, fresh %s)"
              % (bn.running_mean[:3].tolist(), saved["running_mean"][:3].tolist(), fresh.running_mean[:3].tolist()))
        print("N=%d buffers: BatchNorm running statistics restored from the checkpoint: %s" % (WORLD, same))
    engine.close()


def accessors(ckdir):
    # a fresh engine right after load: the checkpoint's step, before any step
    engine, sched = start(3)
    engine.load_checkpoint(ckdir)
    check(engine.global_steps == SAVE_AT and engine.state["global_step"] == SAVE_AT,
          "after load: global_steps %d, state %d" % (engine.global_steps, engine.state["global_step"]))
    check(engine.zero_optimization_stage() == 3, "zero_optimization_stage %r" % engine.zero_optimization_stage())
    check(engine.gradient_accumulation_steps() == 1 and engine.train_micro_batch_size_per_gpu() == MB and
          engine.train_batch_size() == MB * WORLD, "batch geometry %d %d %d" % (
              engine.gradient_accumulation_steps(), engine.train_micro_batch_size_per_gpu(), engine.train_batch_size()))
    check(engine.get_global_grad_norm() is None and not engine.was_step_applied(), "no step yet")
    check(engine.get_lr() == [g["lr"] for g in engine.optimizer.param_groups], "get_lr: the torch scheduler's")
    run(engine, sched, SAVE_AT, SAVE_AT + 1)
    check(engine.global_steps == SAVE_AT + 1 and engine.was_step_applied(), "one more step")
    check(engine.get_global_grad_norm() == engine.last_result.grad_norm > 0, "get_global_grad_norm")
    engine.close()
    # gas 3, a config scheduler, a skipped step
    cfg = config(2)
    cfg["gradient_accumulation_steps"] = 3
    cfg["scheduler"] = {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-2,
                                                       "warmup_num_steps": 5, "warmup_type": "linear"}}
    engine, _, _, sched = zt.initialize(make_model(), cfg, raise_on_nonfinite=False)
    check(isinstance(sched, zt.ConfigScheduler) and engine.lr_scheduler is sched, "the 4th element: %r" % (sched,))
    check(engine.train_batch_size() == MB * 3 * WORLD, "train_batch_size with gas 3: %d" % engine.train_batch_size())
    bounds, lrs = [], []
    for s in range(9):
        x, y = shard(s)
        bounds.append(engine.is_gradient_accumulation_boundary())
        want = engine.get_lr()[0]
        loss = nn.functional.mse_loss(engine(x), y)
        if s == 8:
            loss = loss * float("inf")  # the last window's gradient is not finite: its step is skipped
        engine.backward(loss)
        r = engine.step()
        check(r.lr == want, "step %d: get_lr() said %r, the step used %r" % (s, want, r.lr))
        lrs.append(r.lr)
    check(bounds == [False, False, True] * 3, "is_gradient_accumulation_boundary: %r" % bounds)
    check(sched.get_last_lr() == engine.get_lr() and sched.state_dict()["last_batch_iteration"] == 1,
          "ConfigScheduler: %r, %r" % (sched.get_last_lr(), sched.state_dict()))
    for bad in (sched.step, lambda: sched.load_state_dict({"last_batch_iteration": 7})):
        try:
            bad()
            check(False, "ConfigScheduler: a double step / another position was not refused")
        except ValueError:
            pass
    sched.load_state_dict(sched.state_dict())  # where the engine stands: accepted
    check(len(set(lrs)) > 1, "the config scheduler's lr moved: %r" % lrs)
    check(not engine.was_step_applied() and engine.skipped_steps == 1 and engine.global_steps == 3 and
          engine.state["global_step"] == 2, "after the skipped step: applied %r, skipped %d, global_steps %d, "
          "taken %d" % (engine.was_step_applied(), engine.skipped_steps, engine.global_steps,
                        engine.state["global_step"]))
    check(engine.global_samples == 3 * MB * 3 * WORLD, "global_samples %d" % engine.global_samples)
    engine.close()
    if RANK == 0:
        print("N=%d accessors: global_steps after load %d; boundaries %s; lrs %s" % (WORLD, SAVE_AT, bounds[:3], lrs[:4]))


def main():
    root = sys.argv[1]
    ckdir, empty = os.path.join(root, "ck"), os.path.join(root, "empty")
    if RANK == 0:
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(empty)
    # the uninterrupted run, saving at SAVE_AT with its client state
    engine, sched = start(2)
    lrs = run(engine, sched, 0, SAVE_AT)
    client = {"step": SAVE_AT, "sched": sched.state_dict(), "rng": torch.get_rng_state(),
              "tensor": torch.arange(5, dtype=torch.float64), "note": "resume here"}
    check(engine.save_checkpoint(ckdir, client_state=client) is True, "save_checkpoint returns True")
    at_save = values(engine)
    engine.save(os.path.join(root, "plain"))  # no client state
    lrs += run(engine, sched, SAVE_AT, STEPS)
    want = values(engine)
    for bad in ({"save_latest": False}, {"exclude_frozen_parameters": True}):
        try:
            engine.save_checkpoint(ckdir, client_state=client, **bad)
            check(False, "save_checkpoint(%s) was not refused" % bad)
        except ValueError as err:
            check(list(bad)[0] in str(err), "the refusal names %s: %s" % (list(bad)[0], err))
    engine.close()

    for stage in (2, 3):
        engine, sched = start(stage)
        path, state = engine.load_checkpoint(ckdir)
        check(path == os.path.join(ckdir, "step-%d" % SAVE_AT), "stage %d: load path %s" % (stage, path))
        check(isinstance(state, dict) and state.get("step") == SAVE_AT and state.get("note") == "resume here",
              "stage %d: client state %r" % (stage, state))
        check(torch.equal(state["rng"], client["rng"]) and torch.equal(state["tensor"], client["tensor"]),
              "stage %d: the client state's tensors" % stage)
        sched.load_state_dict(state["sched"])
        got_lrs = run(engine, sched, state["step"], STEPS)
        got = values(engine)
        check(got_lrs == lrs[SAVE_AT:], "stage %d: lrs after resume %s, uninterrupted %s"
              % (stage, got_lrs, lrs[SAVE_AT:]))
        same = all(torch.equal(a, b) for a, b in zip(got, want))
        check(same, "stage %d: resumed parameters differ from the uninterrupted run's (max %.3e)"
              % (stage, max(float((a - b).abs().max()) for a, b in zip(got, want))))
        if RANK == 0:
            print("N=%d stage %d: load_checkpoint -> %s, client state %d keys; 6 resumed steps bitwise the "
                  "uninterrupted run: %s" % (WORLD, stage, os.path.basename(path), len(state), same))
        # the whole model in one file (DeepSpeed's save_16bit_model): rank 0 writes, rank 0 reads it back
        out = os.path.join(root, "model-stage%d" % stage)
        check(engine.save_16bit_model(out) is True, "save_16bit_model returns True")
        if RANK == 0:
            sd = torch.load(os.path.join(out, "pytorch_model.bin"))
            names = [n for n, _ in engine.module.named_parameters()]
            check(list(sd) == names and all(torch.equal(sd[n], v) for n, v in zip(names, got)),
                  "stage %d: save_16bit_model's tensors are not the parameters" % stage)
        # a tag, and a checkpoint without client state
        path, state = engine.load_checkpoint(ckdir, tag="step-%d" % SAVE_AT)
        check(state.get("step") == SAVE_AT, "stage %d: load with tag" % stage)
        path, state = engine.load_checkpoint(os.path.join(root, "plain"))
        check(state == {}, "stage %d: a checkpoint saved by save(): client state %r" % (stage, state))
        engine.close()

    accessors(ckdir)
    module_only(ckdir, at_save)
    buffers(root)
    offline(ckdir, at_save, root)
    engine, _ = start(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = engine.load_checkpoint(empty)
    check(got == (None, None), "no checkpoint: %r" % (got,))
    check(sum("no checkpoint in" in str(x.message) for x in w) == 1, "no checkpoint: one warning")
    try:
        engine.load_checkpoint(empty, tag="step-1")
        check(False, "a missing tag was not an error")
    except zt.ZeroError:
        pass
    for bad in ({"load_optimizer_states": False}, {"load_lr_scheduler_states": False},
                {"load_module_strict": False}):
        try:
            engine.load_checkpoint(ckdir, **bad)
            check(False, "load_checkpoint(%s) was not refused" % bad)
        except ValueError as err:
            check(list(bad)[0] in str(err), "the refusal names %s: %s" % (list(bad)[0], err))
    engine.close()
    if failures:
        return 1
    if RANK == 0:
        print("test_torch_ckpt: all checks passed on %d ranks" % WORLD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
