#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/{config,ckpt}/).

Run once by hand; the output is committed.  Config seeds: DeepSpeed-style
configs covering every section the parser reads (plus the lookup-path
suffix after a NUL byte).  Checkpoint seeds: small, valid manifests (1-2
pipeline stages, fp32/bf16/fp16, replicated and partitioned files, opaque
blobs) followed by a NUL byte and a byte pool the harness writes the blobs
from; and the compacted manifests of real zero-demo saves given on the
command line (optional).  Regression seeds for fixed bugs are added by hand
as regress-*.
"""
import json
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))


def write(kind, name, data):
    d = os.path.join(here, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


CONFIGS = {
    "empty": {},
    "batch": {"train_batch_size": 36, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2},
    "adamw_fp16_z2": {
        "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
        "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                 "hysteresis": 2, "min_loss_scale": 1},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                                  "weight_decay": 0.01}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                                                     "warmup_num_steps": 100}},
        "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}},
    "bf16_z3": {
        "train_batch_size": "auto", "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7,
                              "stage3_param_persistence_threshold": 1e5, "stage3_max_live_parameters": 1e9,
                              "sub_group_size": 1e9},
        "data_types": {"grad_accum_dtype": "fp32"}, "communication_data_type": "bf16"},
    "offload": {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
                "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "adam_w_mode": False}}},
    "pipeline": {"train_batch_size": 8, "pipeline": {"stages": 2, "partition": "parameters"},
                 "zero_optimization": {"stage": 1}},
    "pipeline_real": {"pipeline": {"stages": 3}},
    "sgd_lion": {"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": True}},
                 "scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0.01, "cycle_max_lr": 0.1}}},
    "lion": {"optimizer": {"type": "Lion", "params": {"lr": 1e-4, "betas": [0.9, 0.99]}}},
    "lamb": {"optimizer": {"type": "Lamb", "params": {"lr": 1e-3, "max_coeff": 10.0, "min_coeff": 0.01}},
             "param_groups": [{"lr": 0.1}]},
    "adagrad": {"optimizer": {"type": "Adagrad", "params": {"lr": 0.01}}},
    "auto_stage": {"zero_optimization": {"stage": "auto", "memory_budget_bytes": 1 << 30}},
    "plugin": {"zero_optimization": {"plugin": "stage1-pp", "reduce_once_per_window": True}},
    "unknown_keys": {"foo": 1, "zero_optimization": {"bar": [1, 2, {"x": None}]}, "compression_training": {}},
}

for name, cfg in CONFIGS.items():
    write("config", name + ".json", json.dumps(cfg, indent=1).encode())
# a lookup path after the NUL byte
write("config", "lookup_betas", json.dumps(CONFIGS["adamw_fp16_z2"]).encode() + b"\0optimizer.params.betas[1]")
write("config", "lookup_index", b'{"a":[[1,2],[3,{"b":4}]]}\0a[1].1.b')
write("config", "bad_json", b'{"train_batch_size": ')


def manifest(pp_stages, world, dtype, numels, files_fn, stage=2, nstate=2):
    layouts, params = [], []
    for pp in range(pp_stages):
        off = 0
        for i, n in enumerate(numels):
            params.append({"name": "p%d.%d" % (pp, i), "shape": [n], "numel": n, "dtype": dtype, "group": 0,
                           "pp_stage": pp, "flat_offset": off})
            off += (n + 3) // 4 * 4
        part = (off + world - 1) // world
        layouts.append({"pp_stage": pp, "align": 4, "flat_numel": off, "part_numel": part})
    files = files_fn(layouts, dtype)
    return {"format": "libzero-checkpoint", "version": 1, "tag": "step-1", "library_version": "1.2.0",
            "abi_version": 10002, "plugin": "stage%d" % stage, "stage": stage, "world_size": world,
            "pp_stages": pp_stages, "reshardable": 1, "model_dtype": dtype, "optimizer": 0,
            "optimizer_states": nstate, "chunk_bytes": 4096,
            "state": {"global_step": 1, "skipped_steps": 0, "micro_step": 0, "lr": 0.001,
                      "loss_scaler": {"dynamic": 0, "scale": 1.0, "min_scale": 1.0, "window": 1000,
                                      "hysteresis": 2, "cur_hysteresis": 2, "consecutive_hysteresis": 0,
                                      "cur_iter": 0, "last_overflow_iter": -1}},
            "config": {}, "layouts": layouts, "params": params, "files": files}


SIZE = {"fp32": 4, "bf16": 2, "fp16": 2}


def file_rec(name, blob, rank, pp, kind, dtype, ranges):
    n = sum(hi - lo for lo, hi in ranges)
    nbytes = n * (SIZE[dtype] if kind != "opaque" else 1)
    rec = {"file": name, "blob": blob, "rank": rank, "pp_stage": pp, "bytes": nbytes,
           "crc32c": "00000000" * ((nbytes + 4095) // 4096), "kind": kind}
    if kind != "opaque":
        rec["dtype"] = dtype
        rec["ranges"] = [list(r) for r in ranges]
    return rec


def partitioned(world, kinds):
    def fn(layouts, dtype):
        out = []
        for L in layouts:
            pp, flat, part = L["pp_stage"], L["flat_numel"], L["part_numel"]
            for r in range(world):
                lo, hi = min(r * part, flat), min((r + 1) * part, flat)
                for kind in kinds:
                    dt = dtype if kind == "params" else "fp32"
                    out.append(file_rec("s.%s.r%d.p%d.bin" % (kind, r, pp), "s.%s" % kind, r, pp, kind, dt,
                                        [(lo, hi)]))
                out.append(file_rec("core.r%d.p%d.bin" % (r, pp), "core", r, pp, "opaque", dtype, [(0, 64)]))
        return out
    return fn


def replicated(layouts, dtype):
    out = []
    for L in layouts:
        out.append(file_rec("s0.params.p%d.bin" % L["pp_stage"], "s0.params", 0, L["pp_stage"], "params", dtype,
                            [(0, L["flat_numel"])]))
        # split ranges: the master in two pieces, out of order
        h = L["flat_numel"] // 2
        out.append(file_rec("s0.master.p%d.bin" % L["pp_stage"], "s0.master", 0, L["pp_stage"], "master", "fp32",
                            [(h, L["flat_numel"]), (0, h)]))
    return out


rng = random.Random(17)
seeds = {
    "fp32_w2_stage2": manifest(1, 2, "fp32", [10, 33, 7], partitioned(2, ["master", "state0", "state1"])),
    "bf16_w3_params_master": manifest(1, 3, "bf16", [64, 5, 300], partitioned(3, ["params", "master", "state0"])),
    "fp16_pp2_w2": manifest(2, 2, "fp16", [17, 40], partitioned(2, ["params", "master"]), stage=1, nstate=1),
    "fp32_replicated": manifest(1, 1, "fp32", [1500, 20], replicated, stage=0),
    "bf16_replicated_big": manifest(1, 2, "bf16", [5000], replicated, stage=0, nstate=0),
}
for name, m in seeds.items():
    pool = bytes([0]) + bytes(rng.getrandbits(8) for _ in range(512))
    write("ckpt", name, json.dumps(m, separators=(",", ":")).encode() + b"\0" + pool)

# (1.7) a client state record: global rank 0's opaque blob beside the files
m = manifest(1, 2, "fp32", [10, 33, 7], partitioned(2, ["master", "state0", "state1"]))
m["client_state"] = file_rec("client_state.rank0.bin", "client_state", 0, 0, "opaque", "fp32", [(0, 300)])
pool = bytes([0]) + bytes(random.Random(18).getrandbits(8) for _ in range(512))
write("ckpt", "fp32_w2_client_state", json.dumps(m, separators=(",", ":")).encode() + b"\0" + pool)

# Real manifests (from zero-demo --save-dir), compacted; their blobs are
# too big for the harness to write, so they exercise the parser.
for i, path in enumerate(sys.argv[1:]):
    with open(path) as f:
        m = json.load(f)
    write("ckpt", "demo_%d_%s" % (i, m.get("plugin", "x")), json.dumps(m, separators=(",", ":")).encode())
