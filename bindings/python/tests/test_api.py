"""zero (the ctypes package) without torch: every Engine method against the
real libzero, in one process or under mpirun (any world size: every rank
adds the same gradients, so the mean is the local gradient).
Run: ZERO_LIBRARY=build/core/libzero.so.1 PYTHONPATH=bindings/python python3 test_api.py"""
import array
import ctypes
import math
import os
import shutil
import sys
import tempfile

import zero

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def expect_error(fn, status_name, needle, what):
    try:
        fn()
    except zero.ZeroError as ex:
        check(ex.status_name == status_name, "%s: status %s, expected %s" % (what, ex.status_name, status_name))
        check(needle in ex.message, "%s: message %r lacks %r" % (what, ex.message, needle))
        check(ex.message.startswith("rank ") or ex.call in ("zero_engine_create", "libzero"),
              "%s: message %r is not rank-prefixed" % (what, ex.message))
        return ex
    check(False, "%s: no ZeroError raised" % what)


def sgd_cfg(stage, lr=0.5, **extra):
    c = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": lr}},
         "zero_optimization": {"stage": stage}}
    c.update(extra)
    return c


N = 37  # straddles rank partitions


def grad_of(step, k):
    return math.sin(0.1 * (k + 1) * (step + 1))


def train(stage, host_owned, steps=4, plugin=None, lr=0.5, set_lr=None):
    """SGD on two params; returns the final values (lists) and the engine's results."""
    e = zero.Engine(sgd_cfg(stage, lr), plugin=plugin)
    w = array.array("f", [0.01 * k for k in range(N)])
    b = array.array("f", [1.0, -1.0, 0.5])
    pw = e.register("w", w, host_owned=host_owned)
    pb = e.register("b", b, group=1, host_owned=host_owned)
    e.params_done()
    if set_lr is not None:
        e.set_hparams(lr=set_lr)
    results = []
    for s in range(steps):
        for p in (pb, pw):
            g = e.grad_buffer(p)
            check(g.format == "f" and len(g) == p.numel, "grad_buffer view shape")
            for k in range(p.numel):
                g[k] += grad_of(s, k + (100 if p is pb else 0))
            e.on_grad_ready(p)
        results.append(e.step())
    if host_owned:
        vals = (list(w), list(b))
        with e.gather([pw, pb]) as (vw, vb):
            check(list(vw) == vals[0] and list(vb) == vals[1], "host-owned == gather (stage %d)" % stage)
    else:
        with e.gather([pw, pb]) as (vw, vb):
            vals = (list(vw), list(vb))
    e.close()
    return vals, results


def reference(steps=4, lr=0.5):
    w = [float(ctypes.c_float(0.01 * k).value) for k in range(N)]
    b = [1.0, -1.0, 0.5]
    for s in range(steps):
        w = [ctypes.c_float(w[k] - ctypes.c_float(lr * ctypes.c_float(grad_of(s, k)).value).value).value
             for k in range(N)]
        b = [ctypes.c_float(b[k] - ctypes.c_float(lr * ctypes.c_float(grad_of(s, k + 100)).value).value).value
             for k in range(3)]
    return w, b


def close(a, b, tol=1e-6):
    return all(abs(x - y) <= tol * (1 + abs(y)) for x, y in zip(a, b))


def hparams_resume():
    """(1.4) zero_set_hparams settings survive zero_save / zero_load: a run
    resumed from a checkpoint takes bitwise the same steps as the run that
    saved, without setting them again (AdamW: lr, betas, eps, weight decay
    all matter; a group's own setting and an ALL_GROUPS one)."""
    job = os.environ.get("OMPI_MCA_ess_base_jobid", str(os.getpid()))
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    ck = os.path.join(tempfile.gettempdir(), "zero-py-hparams-" + job)
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
           "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}}}

    def engine():
        e = zero.Engine(cfg)
        w = array.array("f", [0.01 * k for k in range(N)])
        b = array.array("f", [1.0, -1.0, 0.5])
        ps = (e.register("w", w, host_owned=True), e.register("b", b, group=1, host_owned=True))
        e.params_done()
        return e, ps, (w, b)

    def run(e, ps, start, n):
        for s in range(start, start + n):
            for p in ps:
                g = e.grad_buffer(p)
                for k in range(p.numel):
                    g[k] += grad_of(s, k + 100 * p.index)
                e.on_grad_ready(p)
            r = e.step()
        return r

    try:
        e, ps, vals = engine()
        e.set_hparams(lr=0.003, betas=(0.8, 0.95), eps=1e-6)
        e.set_hparams(group=1, lr=0.05, weight_decay=0.1)
        run(e, ps, 0, 3)
        e.save(ck)
        r = run(e, ps, 3, 3)
        want = [list(v) for v in vals]
        check(abs(r.lr - 0.003) < 1e-15, "set_hparams lr in force before the save: %r" % r.lr)
        e.close()
        # a fresh engine, the config's hyper-parameters, nothing set: load must bring them back
        e, ps, vals = engine()
        e.load(ck)
        r = run(e, ps, 3, 3)
        got = [list(v) for v in vals]
        check(got == want, "resumed run equals the saving run bitwise (hparams restored by zero_load)")
        check(r.lr == 0.003, "lr in force after load: %r" % r.lr)
        e.close()
        # without the saved settings the resumed run would differ: the test can fail
        e, ps, vals = engine()
        e.load(ck)
        e.set_hparams(lr="default", betas="default", eps="default")
        e.set_hparams(group=1, lr="default", weight_decay="default")
        run(e, ps, 3, 3)
        check([list(v) for v in vals] != want, "the config's hyper-parameters give other values")
        e.close()
    finally:
        if rank == "0":
            shutil.rmtree(ck, ignore_errors=True)


def params_write():
    """(ABI 1.10) Engine.params_write: the last rank's values become every
    rank's (its host-owned buffer and what gather shows), the other ranks
    passing None; the next SGD step starts from them; refusals: a root
    outside the group, one value per param, a write inside the window."""
    for stage, plugin, owned in ((0, None, True), (1, None, True), (2, None, True), (2, None, False),
                                 (2, "offload", True), (3, None, False)):
        what = "params_write %s%s" % (plugin or "stage %d" % stage, " host-owned" if owned else "")
        e = zero.Engine(sgd_cfg(stage), plugin=plugin)
        w = array.array("f", [1.0] * N)
        b = array.array("f", [2.0] * 3)
        pw = e.register("w", w, host_owned=owned)
        pb = e.register("b", b, host_owned=owned)
        e.params_done()
        root = e.world_size - 1
        mine = array.array("f", [float(e.rank + k) for k in range(N)])
        e.params_write([pw], [mine] if e.rank == root else None, root=root)
        want = [float(root + k) for k in range(N)]
        with e.gather([pw, pb]) as (vw, vb):
            check(list(vw) == want and list(vb) == [2.0] * 3, "%s: gathered %r %r" % (what, list(vw)[:3], list(vb)))
        check(not owned or list(w) == want, "%s: the host-owned buffer %r" % (what, list(w)[:3]))
        expect_error(lambda: e.params_write([pw], [mine], root=e.world_size), "ZERO_ERR_INVALID_ARGUMENT",
                     "root %d" % e.world_size, "%s: root outside the group" % what)
        try:
            e.params_write([pw, pb], [mine])
            check(False, "%s: 2 params, 1 value accepted" % what)
        except ValueError as ex:
            check("2 params but 1 values" in str(ex), "%s: %s" % (what, ex))
        g = e.grad_buffer(pw)
        for k in range(N):
            g[k] += 1.0
        e.on_grad_ready(pw)
        expect_error(lambda: e.params_write([pb], [b], root=0), "ZERO_ERR_STATE", "accumulation window",
                     "%s: inside the window" % what)
        e.on_grad_ready(pb)  # a zero gradient
        e.step()  # the window goes on as if nothing was asked; SGD lr 0.5 from the written values
        with e.gather([pw]) as (vw,):
            check(list(vw) == [x - 0.5 for x in want], "%s: the step after the write %r" % (what, list(vw)[:3]))
        e.close()


def main():
    check(zero.abi_version() >= (1, 1), "abi_version %s" % (zero.abi_version(),))
    check(zero.version().count(".") == 2, "version string")
    check(zero.status_string(2).startswith("ZERO_ERR_CONFIG"), "status_string")

    ref = reference()
    base = None
    for stage in (0, 1, 2):
        for owned in (False, True):
            (w, b), res = train(stage, owned)
            check(close(w, ref[0]) and close(b, ref[1]), "stage %d owned %s vs reference" % (stage, owned))
            check(all(r.boundary and r.taken for r in res) and res[-1].global_step == 4, "step results")
            check(abs(res[0].lr - 0.5) < 1e-12 and res[0].grad_norm > 0, "result lr / norm")
            if base is None:
                base = (w, b)
            check((w, b) == base, "stage %d owned %s bitwise == stage 0" % (stage, owned))
    # zero_param_storage: libzero's own copy, zero-copy, equal to what gather gives
    e = zero.Engine(sgd_cfg(2))
    w = array.array("f", [1.0] * N)
    p = e.register("w", w)
    e.params_done()
    g = e.grad_buffer(p)
    for k in range(N):
        g[k] += 1.0
    e.on_grad_ready(p)
    e.step()
    with e.gather([p]) as (vw,):
        check(list(e.storage(p)) == list(vw) == [0.5] * N, "storage view == gather after a step")
    e.close()
    (w, b), _ = train(2, True, plugin="offload")
    check(close(w, ref[0]) and close(b, ref[1]), "offload host-owned vs reference")

    # set_hparams: configured lr 3.0, told 0.5 -> the lr-0.5 reference
    (w, b), res = train(1, True, lr=3.0, set_lr=0.5)
    check(close(w, ref[0]) and abs(res[0].lr - 0.5) < 1e-12, "set_hparams(lr) overrides the config")

    # config from a file path; memory stats; save / load (host-owned values come back)
    # One directory for every rank of the job: a checkpoint is one directory
    # (its manifest lists every rank's files), so per-rank temp dirs would
    # each hold a part of it.
    job = os.environ.get("OMPI_MCA_ess_base_jobid", str(os.getpid()))
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    tmp = os.path.join(tempfile.gettempdir(), "zero-py-api-" + job)
    os.makedirs(tmp, exist_ok=True)
    try:
        import json
        path = os.path.join(tmp, "ds_config.rank%s.json" % rank)
        with open(path, "w") as f:
            json.dump(sgd_cfg(2), f)
        e = zero.Engine(path)
        check(e.plugin == "stage2" and e.world_size >= 1 and 0 <= e.rank < e.world_size, "engine basics")
        w = array.array("f", [1.0] * N)
        p = e.register("w", w, host_owned=True)
        e.params_done()
        ms = e.memory_stats()
        check(ms["current"]["device"]["params"] > 0 and ms["peak_total"]["device"] > 0, "memory stats %r" % ms)
        check(isinstance(e.comm_stats()["allreduce_calls"], int), "comm stats")

        def one_step(val):
            g = e.grad_buffer(p)
            for k in range(N):
                g[k] += val
            e.on_grad_ready(p)
            return e.step()
        one_step(1.0)
        # (1.3) step timing: one step so far, the phases within the step's time
        tl, tt = e.step_timing(), e.step_timing(total=True)
        named = sum(tl[k] for k in ("exposed_comm_seconds", "reduce_seconds", "norm_seconds", "optimizer_seconds",
                                    "gather_seconds", "copy_seconds"))
        check(tl["micro_steps"] == 1 and tt["micro_steps"] == 1 and tl["step_seconds"] == tt["step_seconds"] > 0
              and 0 < named <= tl["step_seconds"] and tl["optimizer_seconds"] > 0 and tl["hook_seconds"] > 0,
              "step timing %r" % tl)
        ck = os.path.join(tmp, "ckpt")
        check(e.client_state() is None, "no client state before a load")
        e.save(ck)
        saved = list(w)
        one_step(1.0)
        check(list(w) != saved, "a step changed the host-owned tensor")
        e.load(ck)
        check(list(w) == saved, "load wrote the checkpoint's values into the host-owned tensor")
        check(e.client_state() is None, "a checkpoint saved without client state: None")
        # (1.8) zero_save_ex with a tag and a client state; zero_engine_info before and after a load
        info = e.info()
        check(info["global_step"] == 1 and info["micro_step"] == 0 and info["stage"] == 2 and
              info["gradient_accumulation_steps"] == 1, "info after the load: %r" % info)
        one_step(1.0)
        check(e.info()["global_step"] == 2, "info after a step: %r" % e.info())
        e.save(ck, tag="tagged", client_state=b"\x00host bytes\xff" * 3)
        e.load(os.path.join(ck, "tagged"))
        check(e.client_state() == b"\x00host bytes\xff" * 3 and e.info()["global_step"] == 2,
              "client state / step after the tagged load: %r %r" % (e.client_state(), e.info()))
        # errors from calls on a live engine
        g = e.grad_buffer(p)
        e.on_grad_ready(p)
        expect_error(lambda: e.on_grad_ready(p), "ZERO_ERR_DUPLICATE", "twice", "duplicate on_grad_ready")
        e.step()
        e.close()  # collective: every rank is done with the checkpoint after it
        e.close()  # idempotent
    finally:
        if rank == "0":
            shutil.rmtree(tmp, ignore_errors=True)

    hparams_resume()
    params_write()

    # errors cross the boundary: bad config, missing plugin, NaN gradient
    expect_error(lambda: zero.Engine({"optimizer": {"type": "AdamW", "params": {"lr": "fast"}}}),
                 "ZERO_ERR_CONFIG", "lr", "bad config")
    expect_error(lambda: zero.Engine(sgd_cfg(1), plugin="no-such-plugin"), "ZERO_ERR_PLUGIN_NOT_FOUND",
                 "libzero-plugin-no-such-plugin.so", "missing plugin")
    fp16 = sgd_cfg(2, fp16={"enabled": True, "initial_scale_power": 0, "hysteresis": 1, "min_loss_scale": 1})
    e = zero.Engine(fp16)
    h = array.array("H", [0x3C00] * 8)  # 1.0 in f16
    p = e.register("w", h, dtype="f16", host_owned=True)
    e.params_done()
    g = e.grad_buffer(p)
    check(g.format == "H" and len(g) == 8, "f16 view: raw bits")
    g[3] = 0x7E00  # an f16 NaN
    e.on_grad_ready(p)
    ex = expect_error(e.step, "ZERO_ERR_LOSS_SCALE", "overflow", "NaN gradient at the minimum loss scale")
    check(ex is not None and "rank %d:" % e.rank in ex.message, "NaN error names the rank")
    check(list(h) == [0x3C00] * 8, "a skipped step leaves the host-owned tensor alone")
    e.close()
    expect_error(lambda: e.step(), "ZERO_ERR_STATE", "closed", "call on a closed engine")

    # a stacked tensor (3 layers x 4), its slices reported one by one == the whole at once
    outs = []
    for stacked in (True, False):
        e = zero.Engine(sgd_cfg(2))
        st = array.array("f", [1.0] * 12)
        p = e.register("stack", st, host_owned=True, layers=3 if stacked else None)
        e.params_done()
        if stacked:
            for layer in (2, 1, 0):
                v = e.slice_grad_buffer(p, layer)
                check(len(v) == 4, "slice view length")
                for k in range(4):
                    v[k] += layer + 1.0
                e.on_slice_ready(p, layer)
            expect_error(lambda: e.on_slice_ready(p, 0), "ZERO_ERR_DUPLICATE", "layer 0", "slice twice")
        else:
            g = e.grad_buffer(p)
            for k in range(12):
                g[k] += k // 4 + 1.0
            e.on_grad_ready(p)
        e.step()
        outs.append(list(st))
        e.close()
    check(outs[0] == outs[1] and outs[0][0] == 0.5, "stacked slices == whole gradient: %r" % outs)

    # stage 3 keeps gather/release: host-owned refused, gather works
    e = zero.Engine(sgd_cfg(3))
    expect_error(lambda: e.register("w", array.array("f", [0.0] * N), host_owned=True), "ZERO_ERR_UNSUPPORTED",
                 "zero_gather", "stage 3 host-owned")
    p = e.register("w", array.array("f", [2.0] * N))
    e.params_done()
    expect_error(lambda: e.storage(p), "ZERO_ERR_UNSUPPORTED", "zero_gather", "stage 3 storage")
    with e.gather([p]) as (v,):
        check(list(v) == [2.0] * N, "stage 3 gather")
    e.close()

    # one layer of a stacked tensor (ABI 1.6): the same slice views on every
    # stage (stage 3 gathers only the slice), a whole param refused by libzero
    for stage in (0, 2, 3):
        e = zero.Engine(sgd_cfg(stage))
        st = array.array("f", [float(k) for k in range(12)])
        p = e.register("stack", st, layers=3)
        q = e.register("flat", array.array("f", [1.0] * 4))
        e.params_done()
        with e.gather_slices([(p, 2), (p, 0)]) as (v2, v0):
            check(list(v2) == [8.0, 9.0, 10.0, 11.0] and list(v0) == [0.0, 1.0, 2.0, 3.0],
                  "stage %d slices: %r %r" % (stage, list(v2), list(v0)))
        expect_error(lambda: e.gather_slice_addresses([(q, 0)]), "ZERO_ERR_INVALID_ARGUMENT", "zero_register_stacked",
                     "stage %d slice of an unstacked param" % stage)
        expect_error(lambda: e.gather_slice_addresses([(p, 3)]), "ZERO_ERR_INVALID_ARGUMENT", "layer 3 out of range",
                     "stage %d layer out of range" % stage)
        e.close()

    # numpy arrays are buffers too (where numpy is installed)
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        e = zero.Engine(sgd_cfg(1))
        a = np.ones(10, dtype=np.float32)
        p = e.register("np", a, host_owned=True)
        e.params_done()
        g = np.asarray(e.grad_buffer(p))  # zero-copy: numpy over libzero's buffer
        g += 2.0
        e.on_grad_ready(p)
        e.step()
        check(np.allclose(a, 0.0), "numpy host-owned: %r" % a)
        e.close()

    # (1.10) an expert group through set_group(expert_color=): each rank its own expert (expert-DP
    # groups of one rank).  Every rank adds gradient 1: a dense param steps by lr x (sum over N) / N,
    # an expert by lr x (its own 1) / N -- libzero's mean over the data-parallel group (docs/moe.md)
    for stage in (1, 2):
        e = zero.Engine(sgd_cfg(stage, lr=0.5))
        e.set_group(1, expert_color=e.rank)
        n_ranks = e.world_size
        d = array.array("f", [1.0] * 16)
        x = array.array("f", [1.0] * 16)
        pd = e.register("dense", d, host_owned=True)
        px = e.register("expert%d" % e.rank, x, group=1, host_owned=True)
        e.params_done()
        for p in (px, pd):
            g = e.grad_buffer(p)
            for k in range(p.numel):
                g[k] += 1.0
            e.on_grad_ready(p)
        e.step()
        check(list(d) == [0.5] * 16, "stage %d expert group: the dense param %r, expected 0.5" % (stage, d[0]))
        check(list(x) == [1.0 - 0.5 / n_ranks] * 16, "stage %d expert group: the expert %r, expected %r"
              % (stage, x[0], 1.0 - 0.5 / n_ranks))
        e.close()
    e = zero.Engine(sgd_cfg(2))
    try:
        e.set_group(1, expert_color=-2)
        check(False, "set_group(expert_color=-2) accepted")
    except ValueError as ex:
        check("expert_color" in str(ex), "set_group(expert_color=-2): %s" % ex)
    e.close()

    # an engine over a subset of the MPI world: every rank alone
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "0"))
    if world >= 2:
        me = int(os.environ["OMPI_COMM_WORLD_RANK"])
        e = zero.Engine(sgd_cfg(1), ranks=[me])
        check(e.world_size == 1 and e.rank == 0, "ranks=[me]: rank %d of %d" % (e.rank, e.world_size))
        e.close()

    if failures:
        print("%d failure(s)" % len(failures), file=sys.stderr)
        return 1
    print("test_api: all checks passed (world %s)" % os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
