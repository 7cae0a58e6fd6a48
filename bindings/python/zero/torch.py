"""zero.torch: train a PyTorch model with libzero, shaped like deepspeed.initialize.

    import zero.torch as zt
    engine, optimizer, _, _ = zt.initialize(model, config)      # mpirun -np N python3 train.py
    for x, y in data:
        loss = loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()

What happens underneath:
  * Every trainable parameter is registered with libzero in
    model.named_parameters() order (tied weights appear once).
  * Stages 0/1/2 and offload: the parameters are HOST-OWNED (ABI 1.1): the
    model's own tensors are the parameters, libzero writes the new values
    into them in place inside step().  Nothing else changes for the model.
  * Stage 3: a rank keeps only its shard.  Each parameter's tensor is empty
    except while a module that owns it runs: a forward pre-hook gathers it
    (zero_gather, copied into a torch tensor, zero_release), a forward hook
    empties it again, a hook on the module's outputs gathers it again before
    the module's backward, and it is emptied once its gradient is handed over.
    copy.deepcopy / torch.save of the module: inside gathered_parameters()
    (a plain module, without zero.torch's hooks); refused outside.
    While the model's forward runs, autograd saves a tensor that views a
    gathered parameter (linear's weight.t(), ...) as a reference to the
    parameter, rebuilt from the re-gathered one in backward: otherwise every
    gathered copy would live from its forward to its backward (the model).
  * Gradients: the moment autograd has finished accumulating a parameter's
    gradient (register_post_accumulate_grad_hook on torch >= 2.1, the
    gradient-accumulator node's hook on older torch such as Debian's 1.13),
    the gradient is ADDED into libzero's buffer (zero_grad_buffer, a
    zero-copy view), .grad is set to None (stage 2/3 keep no full gradient)
    and zero_on_grad_ready is called, so reduction overlaps backward.
  * The parameters' values belong to libzero after initialize: a write,
    conversion or freeze by the host afterwards would be lost at the next
    step, so step()/save() (stage 3: the next forward, the end of a
    gathered_parameters block) refuse it with ZERO_ERR_STATE.  Weights
    change through DeepSpeed's GatheredParameters(params, modifier_rank=r)
    (or engine.gathered_parameters(params, modifier_rank=r)): rank r's
    changes in the block become every rank's values and libzero's
    (zero_params_write, ABI 1.10), at every stage.  Gradient
    clipping is the config's "gradient_clipping"; torch.nn.utils.
    clip_grad_norm_/clip_grad_value_ refuse the engine's parameters (they
    would clip nothing: there is no .grad), as an enabled AMP GradScaler
    (fp16 loss scaling is the config's "fp16") and DistributedDataParallel
    around the model (zero.torch is the data-parallel layer) do.
  * fp16: backward() multiplies the loss by libzero's loss scale; libzero
    unscales, checks overflow and skips steps.  bf16/fp16 configs convert the
    model to that dtype.
  * Non-finite gradients (raise_on_nonfinite=True, the default): step()
    raises NonFiniteGradientError when a gradient holds Inf/NaN and no loss
    scaler can absorb it (fp32/bf16: any step libzero skips for overflow;
    fp16: libzero's own ZERO_ERR_LOSS_SCALE at min_loss_scale, while
    overflows above it only lower the scale, as in DeepSpeed).  Every rank
    raises (libzero agrees on overflow); the step was skipped, training may
    go on.  raise_on_nonfinite=False: step() returns overflow=True instead.
  * Device: the parameters' device (or device="cuda"/"cuda:N", which moves
    the model).  CUDA: the engine has device_kind CUDA, libzero gets the
    tensors' device addresses (gradient buffers, gathers and libzero's own
    storage are wrapped as torch CUDA tensors through a DLPack capsule, no
    copy), and its work is ordered after torch's
    current CUDA stream: the stream current at initialize() is the engine's
    host stream, and each gradient hand-off and step passes the stream
    current at that moment (docs/gpu.md "Streams").
  * Communicator: under mpirun, the MPI world, or the ranks of a
    torch.distributed process group (the torch world must be the MPI world,
    rank for rank; libzero gets an MPI sub-communicator of the same ranks,
    made collectively: every rank initializes, each with its own group).
    Without mpirun (torchrun, torch.multiprocessing, any
    init_process_group): the torch.distributed group itself (process_group,
    else the default group), gloo or NCCL, whose collectives libzero calls
    back through ctypes (ABI 1.5 ZERO_COMM_HOST, zero/_hostcomm.py).
"""
import collections
import contextlib
import copy
import ctypes
import functools
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
import weakref

import torch
import torch.utils.dlpack

from . import _dlpack
from . import _lib as L
from . import tools as _tools
from .engine import Engine as _CEngine
from .engine import ZeroError

__all__ = ["initialize", "ZeroEngine", "ZeroError", "NonFiniteGradientError", "ConfigScheduler", "GatheredParameters",
           "is_moe_param", "split_params_into_different_moe_groups_for_optimizer",
           "get_fp32_state_dict_from_zero_checkpoint", "load_state_dict_from_zero_checkpoint"]


class NonFiniteGradientError(ZeroError):
    """step() found Inf/NaN gradients that no loss scaler absorbs (see
    raise_on_nonfinite).  `status` is ZERO_ERR_LOSS_SCALE; `message` is
    rank-prefixed; `result` is the skipped step's zero.StepResult (None when
    libzero itself refused the step at fp16's min_loss_scale)."""

    def __init__(self, status, message, call="", result=None):
        super().__init__(status, message, call)
        self.result = result

_TORCH_DTYPE = {L.DTYPE_F32: torch.float32, L.DTYPE_BF16: torch.bfloat16, L.DTYPE_F16: torch.float16}


def _load_config(config):
    if isinstance(config, dict):
        return dict(config)
    if isinstance(config, (str, os.PathLike)) and not str(config).lstrip().startswith("{"):
        with open(config) as f:
            return json.load(f)
    return json.loads(str(config))


def _model_dtype(cfg):
    if (cfg.get("fp16") or {}).get("enabled"):
        return torch.float16
    if (cfg.get("bf16") or cfg.get("bfloat16") or {}).get("enabled"):
        return torch.bfloat16
    return torch.float32


def _stage_of(cfg, plugin):
    name = plugin or os.environ.get("ZERO_PLUGIN") or (cfg.get("zero_optimization") or {}).get("plugin")
    if name:
        base = os.path.basename(str(name))
        if base.startswith("libzero-plugin-"):
            base = base[len("libzero-plugin-"):].split(".so")[0]
        if base == "stage3":
            return 3
        if base in ("stage0", "stage1", "stage2", "offload", "stage1-pp"):
            return 0
    return int((cfg.get("zero_optimization") or {}).get("stage", 0))


# Stage 3: module types whose forward uses their submodules' parameters
# without calling the submodules; extend it for such modules of your own.
WHOLE_SUBTREE_MODULES = [torch.nn.MultiheadAttention]

_LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK")


def _resolve_device(model, device):
    """The torch.device zero.torch trains on: `device` (the model is moved
    there; "cuda" without an index picks libzero's rule, the launcher's local
    rank modulo the visible GPUs), or where the parameters are."""
    if device is None:
        devs = {p.device for p in model.parameters()}
        if len(devs) > 1:
            raise ZeroError(11, "zero.torch trains a model on one device; its parameters are on %s (move it, or "
                                "pass device=)" % sorted(str(d) for d in devs), "zero.torch")
        dev = devs.pop() if devs else torch.device("cpu")
    else:
        dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ZeroError(11, "zero.torch drives CPU and CUDA tensors, not %s" % dev, "zero.torch")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ZeroError(15, "device %s: this torch has no usable CUDA (torch %s, built with CUDA %s)"
                            % (dev, torch.__version__, torch.version.cuda), "zero.torch")
        if dev.index is None:
            local = next((int(os.environ[v]) for v in _LOCAL_RANK_VARS if os.environ.get(v, "").isdigit()), 0)
            dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    if device is not None:
        model.to(dev)
    return dev


def _torch_communicator(process_group, comm):
    """Without an MPI launcher (torchrun, torch.multiprocessing, a plain
    init_process_group): libzero's communicator is the torch.distributed
    group itself (process_group, else the default group), its collectives
    called back from libzero (ABI 1.5 ZERO_COMM_HOST, zero/_hostcomm.py).
    Returns Engine's comm= argument.  A world announced by the environment
    (WORLD_SIZE > 1) but not initialised is refused: each process would
    otherwise train alone."""
    import torch.distributed as dist
    if not isinstance(comm, str):
        return comm  # a group or a zero.TorchHostComm, as given
    if comm not in ("auto", "torch"):
        return comm
    if dist.is_available() and dist.is_initialized():
        if process_group is not None:
            return process_group
        return "torch" if dist.get_world_size() > 1 or comm == "torch" else comm
    world = int(os.environ["WORLD_SIZE"]) if os.environ.get("WORLD_SIZE", "").isdigit() else 1
    if world > 1 or process_group is not None or comm == "torch":
        raise ZeroError(11, "rank %s: this process is one of %d started without mpirun (WORLD_SIZE is set), but "
                            "torch.distributed is not initialised, so libzero has no group to train over and each "
                            "process would train alone: call torch.distributed.init_process_group('gloo') (or "
                            "'nccl') before zero.torch.initialize, or launch with `mpirun -np N`"
                        % (os.environ.get("RANK", "?"), world), "zero.torch")
    return comm


_DL_TYPES = {torch.float32: (_dlpack.KDL_FLOAT, 32), torch.float16: (_dlpack.KDL_FLOAT, 16),
             torch.bfloat16: (_dlpack.KDL_BFLOAT, 16)}


def _storage_ptr(t):
    """The address of the storage `t` views (which tensors share memory)."""
    return t.untyped_storage().data_ptr() if _UNTYPED_STORAGE else t.storage().data_ptr()


_UNTYPED_STORAGE = hasattr(torch.Tensor, "untyped_storage")  # torch >= 2.0 (t.storage() warns there)


def _name_list(names):
    """'a', 'b', 'c', 'd' and N more: parameter names for a message, each once."""
    ns = list(dict.fromkeys(names))
    return ", ".join("'%s'" % n for n in ns[:4]) + (" and %d more" % (len(ns) - 4) if len(ns) > 4 else "")


def _fingerprint(t):
    """The sum of a tensor's bit patterns: any one element changed changes
    it (stage 3's read-only blocks find writes through p.data with it)."""
    bits = t.detach().reshape(-1).view(torch.int16 if t.element_size() == 2 else torch.int32)
    return int(bits.sum(dtype=torch.int64))


class _SavedParamView:
    """What autograd keeps, in place of a tensor that views a stage-3
    parameter's gathered copy, from forward to backward: the parameter and
    the view's geometry.  Holding the tensor would keep the gathered copy
    alive after the module's forward hook emptied the parameter."""
    __slots__ = ("param", "size", "stride", "offset")

    def __init__(self, param, t):
        self.param, self.size, self.stride, self.offset = param, t.size(), t.stride(), t.storage_offset()


# ---------------------------------------------------------------- gradient clipping
# A torch habit: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
# between backward and step.  Under zero.torch the gradients live in libzero
# (p.grad is None after backward), so torch would find no gradient, clip
# nothing and return 0: training without the clipping asked for.  While an
# engine lives, torch.nn.utils' clip functions refuse its parameters and say
# what to use instead; other parameters pass through untouched.  A script
# that imported the function by name before (`from torch.nn.utils import
# clip_grad_norm_`, the common form) holds the original: installing the
# guard also rebinds every module-level name bound to the original in the
# loaded modules (one scan of sys.modules, once per process).  A reference
# kept elsewhere (a local variable, an object's attribute) stays unguarded.

_engine_of_param = {}  # id(param) -> weakref to the live ZeroEngine that trains it


def _engine_training(params):
    if not _engine_of_param:
        return None
    if isinstance(params, torch.Tensor):
        params = [params]
    for p in params:
        ref = _engine_of_param.get(id(p))
        engine = ref() if ref is not None else None
        if engine is not None and engine.z._e is not None:
            return engine
    return None


def _by_engine(params):
    """([(engine, its params)] in the engines' creation order -- the same
    on every rank, for their collective blocks --, the params of no live
    engine)."""
    blocks, foreign = {}, []
    for p in params:
        ref = _engine_of_param.get(id(p))
        engine = ref() if ref is not None else None
        if engine is None or engine.z._e is None:
            foreign.append(p)
        else:
            blocks.setdefault(id(engine), (engine, []))[1].append(p)
    return sorted(blocks.values(), key=lambda b: b[0].z._serial), foreign


def _describe(module, params):
    """Tensors for a message: their names in `module`, else their shapes."""
    names = {id(p): n for n, p in module.named_parameters()} if module is not None else {}
    return ", ".join("'%s'" % names[id(p)] if id(p) in names else "a tensor of shape %s" % (tuple(p.shape),)
                     for p in params[:4]) + (" and %d more" % (len(params) - 4) if len(params) > 4 else "")


class GatheredParameters:
    """DeepSpeed's deepspeed.zero.GatheredParameters for the parameters of
    zero.torch engines: code written for DeepSpeed ports by changing the
    import.

        with zero.torch.GatheredParameters([emb.weight, lin.bias], modifier_rank=0):
            if rank == 0:
                emb.weight.data[3] = 7.0      # or nn.init.*_(p) under torch.no_grad()

    Each parameter's engine is found from the parameter (engines in their
    creation order when the block spans several); the block is that
    engine's gathered_parameters(params, modifier_rank), which says what
    happens at each stage: inside, the full values (stage 3 gathers them:
    collective, every rank enters the block); with modifier_rank=r the
    block's changes on rank r (of the data-parallel group) become the
    parameters' values on every rank and in libzero (zero_params_write),
    between accumulation windows; without it the block is read-only and a
    write is refused.  enabled=False: a no-op.  fwd_module (DeepSpeed
    registers the params as the module's external parameters for a
    forward inside the block) is accepted and not needed: at stage 3 the
    block's parameters stay gathered for any forward inside it.

    A tensor no live engine trains (a parameter frozen when zt.initialize
    ran, another model's, one whose engine was closed) is a plain torch
    tensor that already holds its full value: a read-only block leaves it
    alone, as DeepSpeed does for a parameter it does not partition.  With
    modifier_rank it is refused (ValueError): libzero holds no copy of it,
    so the block could not make rank r's value every rank's, and DeepSpeed's
    silent no-op would leave the ranks with different values.  __enter__
    returns None, as DeepSpeed's does."""

    def __init__(self, params, modifier_rank=None, fwd_module=None, enabled=True):
        self._blocks, self._modifier_rank, self._stack = [], modifier_rank, None
        if not enabled:
            return
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        self._blocks, foreign = _by_engine(params)
        if foreign and modifier_rank is not None:
            module = self._blocks[0][0].module if self._blocks else None
            raise ValueError("GatheredParameters(modifier_rank=%r): %s trained by no live zero.torch engine (frozen "
                             "when zt.initialize ran, another model's, or its engine was closed): libzero holds no "
                             "copy of them, so the block cannot make rank %r's values every rank's; leave them out "
                             "(e.g. [p for p in model.parameters() if p.requires_grad]) and write plain tensors on "
                             "every rank" % (modifier_rank, _describe(module, foreign), modifier_rank))

    def __enter__(self):
        with contextlib.ExitStack() as stack:  # a block that fails to open closes those opened before it
            for engine, params in self._blocks:
                stack.enter_context(engine.gathered_parameters(params, self._modifier_rank))
            self._stack = stack.pop_all()
        return None

    def __exit__(self, *exc):
        stack, self._stack = self._stack, None
        return stack.__exit__(*exc) if stack is not None else False


def _unguarded(inner):
    """inner exists and is not one of zero.torch's guards already (installing
    twice would wrap the guard in itself)."""
    return inner is not None and not getattr(inner, "_zero_guard", False)


def _as_guard(guard, inner):
    """guard, dressed as the torch function it stands in front of and marked."""
    functools.update_wrapper(guard, inner)
    guard._zero_guard = True
    return guard


def _guard_clip(name, advice):
    import torch.nn.utils as U
    import torch.nn.utils.clip_grad as C
    inner = getattr(U, name, None)
    if not _unguarded(inner):
        return

    def clip(parameters, *args, **kwargs):
        if not isinstance(parameters, torch.Tensor):
            parameters = list(parameters)  # may be a generator: read it once
        engine = _engine_training(parameters)
        if engine is not None:
            raise ZeroError(11, "rank %d: torch.nn.utils.%s on parameters that zero.torch trains: their gradients "
                                "live in libzero (p.grad is None after backward), so torch would clip nothing; %s"
                            % (engine.z.rank, name, advice), "zero.torch")
        return inner(parameters, *args, **kwargs)
    clip = _as_guard(clip, inner)
    setattr(U, name, clip)
    if getattr(C, name, None) is inner:
        setattr(C, name, clip)
    _rebind(inner, clip)


def _rebind(old, new):
    """Module-level names bound to `old` in every loaded module now name `new`."""
    for m in list(sys.modules.values()):
        try:
            d = vars(m)
        except TypeError:  # a placeholder without __dict__
            continue
        try:
            hits = [k for k, v in list(d.items()) if v is old]
        except Exception:  # a module whose namespace cannot be read: left alone
            continue
        for k in hits:
            d[k] = new


def _guard_clipping():
    _guard_clip("clip_grad_norm_", "set \"gradient_clipping\": max_norm in the config (libzero clips by the "
                "global L2 norm at each step, as clip_grad_norm_ does) and read the norm from "
                "engine.step().grad_norm")
    _guard_clip("clip_grad_value_", "libzero clips by the global norm only: set \"gradient_clipping\" in the "
                "config")


# Another torch habit: automatic mixed precision's GradScaler,
#   scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update().
# Its step/unscale_ look for inf checks in p.grad, which zero.torch leaves
# None, and fail with "No inf checks were recorded for this optimizer";
# libzero scales fp16 losses itself.  An enabled GradScaler given the
# engine's optimizer is refused with what to use instead (a disabled one,
# as on a machine without CUDA, passes through: it only calls step()).

def _guard_grad_scaler():
    classes = []
    for mod in ("torch.amp", "torch.cuda.amp"):
        try:
            cls = getattr(__import__(mod, fromlist=["GradScaler"]), "GradScaler", None)
        except ImportError:
            cls = None
        if cls is not None and cls not in classes:
            classes.append(cls)
    for cls in classes:
        for name in ("unscale_", "step"):
            inner = cls.__dict__.get(name)  # a subclass that inherits it is covered by its base
            if not _unguarded(inner):
                continue

            def guarded(self, optimizer, *args, _inner=inner, _name=name, **kwargs):
                if isinstance(optimizer, _Optimizer) and self.is_enabled():
                    engine = optimizer._engine
                    raise ZeroError(11, "rank %d: GradScaler.%s on zero.torch's optimizer: libzero holds the "
                                        "gradients (p.grad is None after backward, so the scaler finds nothing to "
                                        "unscale or check) and scales fp16 losses itself; drop the GradScaler, set "
                                        "\"fp16\": {\"enabled\": true} in the config (dynamic loss scaling by "
                                        "default) and call engine.backward(loss) and engine.step() (bf16 and fp32 "
                                        "need no scaler)" % (engine.z.rank if engine else -1, _name), "zero.torch")
                return _inner(self, optimizer, *args, **kwargs)
            setattr(cls, name, _as_guard(guarded, inner))


# And data-parallel wrappers: DistributedDataParallel (or FSDP, when the
# host imported it before initialize) around a
# model zero.torch trains would broadcast rank 0's tensors into it (a write
# libzero refuses at the next step, with a message about loading weights)
# and reduce every gradient a second time through its own hooks.  zero.torch
# is the data-parallel layer: wrapping the engine's model is refused at the
# wrapper's construction, before it touches a tensor.

def _guard_wrappers():
    targets = []
    try:
        from torch.nn.parallel import DistributedDataParallel
        targets.append(DistributedDataParallel)
    except ImportError:
        pass
    fsdp = sys.modules.get("torch.distributed.fsdp")  # not imported for this: heavy, and broken on some builds
    if fsdp is not None and getattr(fsdp, "FullyShardedDataParallel", None) is not None:
        targets.append(fsdp.FullyShardedDataParallel)
    for cls in targets:
        inner = cls.__dict__.get("__init__")
        if not _unguarded(inner):
            continue

        def init(self, module, *args, _inner=inner, _name=cls.__name__, **kwargs):
            engine = _engine_training(list(module.parameters())) if isinstance(module, torch.nn.Module) else None
            if engine is not None:
                raise ZeroError(11, "rank %d: %s around a model that zero.torch trains: libzero already reduces "
                                    "the gradients over the ranks and partitions the states (a second "
                                    "data-parallel layer would broadcast into its parameters and reduce every "
                                    "gradient twice); call the model (or the engine) directly"
                                % (engine.z.rank, _name), "zero.torch")
            return _inner(self, module, *args, **kwargs)
        cls.__init__ = _as_guard(init, inner)


def _dlpack_tensor(address, numel, dtype, device):
    """A 1-D torch tensor over `numel` elements at `address` on `device`
    (libzero's memory; no copy) through a DLPack capsule (zero/_dlpack.py).
    Used for CUDA memory, where torch.frombuffer cannot go."""
    code, bits = _DL_TYPES[dtype]
    kind = _dlpack.KDL_CUDA if device.type == "cuda" else _dlpack.KDL_CPU
    t = torch.utils.dlpack.from_dlpack(_dlpack.capsule(address, numel, code, bits, kind, device.index or 0))
    if numel and t.data_ptr() != int(address):  # a copy would lose every write silently
        raise ZeroError(16, "torch copied libzero's memory at 0x%x instead of viewing it" % address, "zero.torch")
    return t


_ADAM_FAMILY = ("adam", "adamw", "lamb", "lion")   # optimizer types that have betas (OneCycleLR cycles beta1)
_ADAM_DEFAULTS = {"betas": (0.9, 0.999), "eps": 1e-8}
_warned = set()


def _warn_once(key, msg):
    """A porting note printed once per process (the rank is in msg)."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, UserWarning, stacklevel=4)


def _same(a, b):
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b)))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return float(a) == float(b)


def is_moe_param(param):
    """DeepSpeed's test (deepspeed.moe.utils.is_moe_param): a mixture-of-
    experts layer marks its experts' parameters with allreduce = False
    (and group_name = "ep_size_<E>", E its expert-parallel size)."""
    return getattr(param, "allreduce", True) is False


def split_params_into_different_moe_groups_for_optimizer(param_groups, max_group_size=None):
    """DeepSpeed's name (deepspeed.moe.utils): each param group's expert
    parameters (is_moe_param) move into a group of their own per
    group_name, with the group's other settings, "name": the group_name and
    "moe": True; dense parameters stay where they were (a group left empty
    stays, so group indices keep their meaning).  param_groups: a dict, a
    list or tuple of dicts, or parameters.  Returns a new list of dicts.
    max_group_size (DeepSpeed's split of big expert groups) is libzero's
    config key moe.max_group_size (its tiled step, docs/moe.md): given
    here it is refused, not ignored."""
    if max_group_size is not None:
        raise ValueError("zero.torch: max_group_size is the config's \"moe\": {\"max_group_size\": N} in libzero "
                         "(its optimizer step runs in tiles of that size); leave it out here")
    if isinstance(param_groups, dict):
        param_groups = [param_groups]
    else:
        param_groups = list(param_groups)
        if not param_groups or not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
    out, moe = [], {}
    for g in param_groups:
        params = list(g["params"])
        out.append(dict(g, params=[p for p in params if not is_moe_param(p)]))
        for p in params:
            if not is_moe_param(p):
                continue
            name = getattr(p, "group_name", None)
            if not isinstance(name, str):
                raise ValueError("zero.torch: an expert parameter (allreduce=False) has no group_name; a "
                                 "mixture-of-experts layer names it \"ep_size_<E>\" after its expert-parallel size")
            key = (id(g), name)
            if key not in moe:
                moe[key] = dict(g, params=[], name=name, moe=True)
            moe[key]["params"].append(p)
    return out + list(moe.values())


def _ep_size(name, what):
    """The expert-parallel size in DeepSpeed's group name "ep_size_<E>"."""
    if isinstance(name, str) and name.startswith("ep_size_") and name[8:].isdigit() and int(name[8:]) > 0:
        return int(name[8:])
    raise ValueError("zero.torch: %s: expected DeepSpeed's expert group name \"ep_size_<E>\" (E the expert-"
                     "parallel size), got %r" % (what, name))


def _moe_groups(groups, auto, names):
    """(1.10) Which param groups are expert groups, and their expert-parallel
    size: {group index: E}.  A group mixing expert (is_moe_param) and dense
    parameters is split (split_params_into_different_moe_groups_for_
    optimizer) when zero.torch made the groups itself (auto), refused
    otherwise, as DeepSpeed refuses it: expert gradients are reduced over
    other ranks than dense ones, so they need their own group."""
    if not any(is_moe_param(p) for g in groups for p in g["params"]) and not any(g.get("moe") for g in groups):
        return groups, {}
    if auto:
        groups = split_params_into_different_moe_groups_for_optimizer(groups)
    experts = {}
    for i, g in enumerate(groups):
        params = list(g["params"])
        moe = [p for p in params if is_moe_param(p)]
        if moe and len(moe) != len(params):
            raise ValueError("zero.torch: param_groups[%d] mixes expert parameters (allreduce=False, e.g. %s) with "
                             "dense ones (e.g. %s); give the experts groups of their own with "
                             "zero.torch.split_params_into_different_moe_groups_for_optimizer(param_groups), as "
                             "with DeepSpeed" % (i, names.get(id(moe[0]), "?"),
                                                 names.get(id(next(p for p in params if not is_moe_param(p))), "?")))
        if g.get("moe") and not moe:
            raise ValueError("zero.torch: param_groups[%d] says \"moe\": True but holds no expert parameter "
                             "(allreduce=False)" % i)
        if not moe:
            continue
        sizes = {_ep_size(getattr(p, "group_name", None), "expert parameter %s" % names.get(id(p), "?"))
                 for p in moe}
        if g.get("name") is not None:
            sizes.add(_ep_size(g["name"], "param_groups[%d] name" % i))
        if len(sizes) != 1:
            raise ValueError("zero.torch: param_groups[%d] holds experts of several expert-parallel sizes %s; one "
                             "group per size (split_params_into_different_moe_groups_for_optimizer)"
                             % (i, sorted(sizes)))
        experts[i] = sizes.pop()
    return groups, experts


def _translate_optimizer(opt, cfg):
    """A torch optimizer passed to initialize, as libzero's: returns (the
    config's "optimizer" section, param groups for libzero).  Refuses with
    ValueError what libzero would run differently: an optimizer type it does
    not translate, options libzero does not implement (amsgrad, maximize,
    dampening), options that differ between groups but are one setting in
    libzero (momentum, nesterov), an optimizer that has already stepped (its
    state would be lost), and a config whose own "optimizer" section says
    something else (which one wins would be a guess).  Per-group lr, betas,
    eps and weight_decay become libzero param groups (zero_set_hparams).
    foreach / fused / capturable / differentiable only choose torch's
    implementation: ignored."""
    kinds = {torch.optim.Adam: "Adam", torch.optim.AdamW: "AdamW", torch.optim.SGD: "SGD"}
    kind = kinds.get(type(opt))
    if kind is None:
        raise ValueError("zero.torch.initialize(optimizer=%s): zero.torch translates torch.optim.Adam, AdamW and "
                         "SGD only (libzero runs the optimizer itself); for another one name libzero's optimizer "
                         "in the config's \"optimizer\" section (docs/config.md) and leave optimizer= out"
                         % type(opt).__name__)
    if any(len(s) for s in opt.state.values()):
        raise ValueError("zero.torch.initialize(optimizer=%s): the optimizer has already stepped; libzero starts "
                         "its own optimizer state, so that state would be lost: pass a fresh optimizer" % kind)
    pgs = opt.param_groups
    for i, g in enumerate(pgs):
        for key, ok in (("amsgrad", False), ("maximize", False)):
            if g.get(key, ok) != ok:
                raise ValueError("zero.torch.initialize(optimizer=%s): param_groups[%d] has %s=%r, which libzero "
                                 "does not implement" % (kind, i, key, g[key]))
        if kind == "SGD" and g.get("dampening", 0) != 0:
            raise ValueError("zero.torch.initialize(optimizer=SGD): param_groups[%d] has dampening=%r; libzero's "
                             "SGD has no dampening" % (i, g["dampening"]))
    fixed = ("momentum", "nesterov") if kind == "SGD" else ()
    for key in fixed:
        vals = {pg[key] for pg in pgs}
        if len(vals) > 1:
            raise ValueError("zero.torch.initialize(optimizer=SGD): the param groups have different %s (%s); "
                             "libzero has one %s for every group" % (key, sorted(vals), key))
    g0 = pgs[0]
    params = {"lr": g0["lr"], "weight_decay": g0["weight_decay"]}
    hp = ("lr", "weight_decay")
    if kind == "SGD":
        params.update(momentum=g0["momentum"], nesterov=bool(g0["nesterov"]))
    else:
        params.update(betas=list(g0["betas"]), eps=g0["eps"])
        hp += ("betas", "eps")
        if kind == "Adam":  # torch's Adam adds the decay to the gradient (L2): libzero's Adam without adam_w_mode
            params["adam_w_mode"] = False
    mine = {"type": kind, "params": params}
    theirs = cfg.get("optimizer")
    if theirs is not None:
        tp = dict(theirs.get("params") or {})
        diff = []
        if str(theirs.get("type", "")).lower() != kind.lower():
            diff.append("type %r vs torch's %s" % (theirs.get("type"), kind))
        for k, v in tp.items():
            if k in params and not _same(v, params[k]):
                diff.append("params.%s %r vs torch's %r" % (k, v, params[k]))
        if kind == "Adam" and "adam_w_mode" not in tp and any(pg["weight_decay"] for pg in pgs):
            diff.append("params.adam_w_mode (default true: decoupled decay) vs torch Adam's L2 decay")
        if tp.get("bias_correction", True) is not True:
            diff.append("params.bias_correction %r vs torch's true" % tp["bias_correction"])
        if theirs.get("param_groups") is not None:
            diff.append("param_groups (the torch optimizer's param_groups are the groups)")
        if diff:
            raise ValueError("zero.torch.initialize: both the config's \"optimizer\" section and optimizer=%s name "
                             "the optimizer and they disagree (%s); remove one, or make them say the same"
                             % (kind, "; ".join(diff)))
        tp.update(params)
        mine = dict(theirs, type=kind, params=tp)
    # (1.10) DeepSpeed's mixture-of-experts marks ("moe", "name") stay with their group
    groups = [dict({k: (tuple(g[k]) if k == "betas" else g[k]) for k in hp},
                   **{k: g[k] for k in ("moe", "name") if k in g}, params=list(g["params"]))
              for g in pgs]
    return mine, groups


class _Optimizer(torch.optim.Optimizer):
    """What initialize returns as the optimizer: a torch.optim.Optimizer (so
    torch's lr schedulers take it) whose param_groups' "lr" (and
    "weight_decay", "betas", "eps") a host or a scheduler may change; the
    engine hands changes to libzero (zero_set_hparams) at the next step.
    step() is engine.step() (libzero's zero_step), so a scheduler counts it.
    libzero owns the optimizer state: `state` stays empty, and the groups are
    fixed at initialize (add_param_group is refused)."""

    def __init__(self, groups, defaults, engine=None, fixed=None):
        # Not torch's __init__: it would re-check the groups (libzero already
        # registered them, tied weights once) and wrap step for its profiler.
        self.param_groups = groups
        self.defaults = defaults
        self.state = collections.defaultdict(dict)
        for hooks in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks",
                      "_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks",
                      "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks"):
            setattr(self, hooks, collections.OrderedDict())  # torch >= 2 reads these
        self._engine = engine
        self._fixed = dict(fixed or {})  # settings libzero cannot change after initialize (SGD momentum)
        self._pushed = [dict() for _ in groups]

    def step(self, closure=None):
        """engine.step(): zero_step (once per micro-batch)."""
        if closure is not None:
            raise ValueError("zero.torch: optimizer.step(closure) is not supported; call engine.backward(loss) "
                             "and then engine.step() (or optimizer.step())")
        if self._engine is None:
            raise ValueError("zero.torch: this optimizer has no engine")
        return self._engine._step()

    def zero_grad(self, set_to_none=True):
        """Gradients live in libzero: nothing to clear."""

    def add_param_group(self, param_group):
        raise ValueError("zero.torch: libzero's parameter groups are fixed at initialize; pass every group "
                         "there (model_parameters=, or the torch optimizer's param_groups)")

    def state_dict(self):
        return {"param_groups": [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]}

    def load_state_dict(self, state_dict):
        """Takes state_dict()'s hyper-parameters (libzero's own state comes
        with engine.load)."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups):
            raise ValueError("zero.torch: the state dict has %d param groups, this optimizer %d"
                             % (len(saved), len(self.param_groups)))
        for g, s in zip(self.param_groups, saved):
            g.update({k: v for k, v in s.items() if k != "params"})

    def _adopt(self, saved):
        """After zero_load: libzero now uses the checkpoint's settings
        (`saved`: manifest "state.hparams", None for an older checkpoint);
        make param_groups say the same, fields without a setting back to
        the defaults libzero then uses."""
        if saved is None:
            return
        over = {int(h["group"]): h for h in saved}
        for i, g in enumerate(self.param_groups):
            mine, every = over.get(i, {}), over.get(-1, {})

            def val(field, default):
                return mine.get(field, every.get(field, default))
            g["lr"] = val("lr", self.defaults["lr"])
            g["weight_decay"] = val("weight_decay", self.defaults["weight_decay"])
            if "eps" in g or "eps" in mine or "eps" in every:
                g["eps"] = val("eps", self.defaults.get("eps", 1e-8))
            if "betas" in g or "beta1" in mine or "beta1" in every or "beta2" in mine or "beta2" in every:
                b = self.defaults.get("betas", (0.9, 0.999))
                g["betas"] = (val("beta1", b[0]), val("beta2", b[1]))
            self._pushed[i] = {k: (tuple(g[k]) if k == "betas" else g[k])
                               for k in ("lr", "weight_decay", "eps", "betas") if k in g}

    def _sync(self, engine):
        for i, g in enumerate(self.param_groups):
            for k, v in self._fixed.items():  # e.g. OneCycleLR cycling SGD's momentum: libzero would not follow
                if k in g and g[k] != v:
                    raise ValueError("zero.torch: param_groups[%d][%r] changed from %r to %r, but libzero's %s is "
                                     "fixed at initialize (a OneCycleLR/CyclicLR on SGD: pass cycle_momentum=False)"
                                     % (i, k, v, g[k], k))
            want = {k: g[k] for k in ("lr", "weight_decay", "eps") if k in g}
            if "betas" in g:
                want["betas"] = tuple(g["betas"])
            changed = {k: v for k, v in want.items() if self._pushed[i].get(k) != v}
            if changed:
                engine.set_hparams(group=i, **changed)
                self._pushed[i].update(changed)


class ZeroEngine:
    """A model trained by libzero (returned by initialize)."""

    # Tests: wrap host memory through DLPack too, as on CUDA, so that the CUDA
    # path's tensor wrapping runs a whole training on a machine without a GPU.
    DLPACK_ON_CPU = False
    # Stage 3: save views of gathered parameters as references (tests turn it
    # off for a control run; _install_forward_wrapper says why it is on)
    SAVED_PARAM_REFS = True

    def __init__(self, model, config, plugin=None, model_parameters=None, process_group=None, log=None,
                 param_storage="host", device=None, raise_on_nonfinite=True, comm="auto", optimizer=None,
                 broadcast_buffers=False):
        if param_storage not in ("host", "libzero"):
            raise ValueError("param_storage must be 'host' or 'libzero'")
        cfg = _load_config(config)
        torch_groups = None
        if optimizer is not None:  # checked before anything is built: a refusal leaves the model untouched
            if model_parameters is not None:
                raise ValueError("zero.torch.initialize: pass the parameter groups either as model_parameters= or "
                                 "through optimizer=, not both (the torch optimizer's param_groups are the groups)")
            cfg["optimizer"], torch_groups = _translate_optimizer(optimizer, cfg)
        self.module = model
        self.config = cfg
        self.raise_on_nonfinite = bool(raise_on_nonfinite)
        self.device = _resolve_device(model, device)
        self._cuda = self.device.type == "cuda"
        if broadcast_buffers:  # refused before libzero's engine exists
            L.require("zero_broadcast", "broadcast_buffers=True")
            if self._cuda:
                raise ZeroError(11, "broadcast_buffers=True is not supported on a CUDA engine yet (libzero's "
                                "zero_broadcast moves host memory); leave it False or broadcast the buffers with "
                                "torch.distributed", "zero.torch")
        self.dtype = _model_dtype(cfg)
        if self.dtype != torch.float32:
            model.to(self.dtype)
        if L.under_mpi_launcher():  # MPI: a group becomes an MPI sub-communicator of the same ranks
            ranks = self._group_ranks(process_group)
        else:  # torchrun & co: the torch.distributed group is the communicator
            ranks, comm = None, _torch_communicator(process_group, comm)
        self.stage = _stage_of(cfg, plugin)
        if self._cuda:
            self.z = _CEngine(cfg, plugin=plugin, log=log, ranks=ranks, comm=comm, device="cuda",
                              device_index=self.device.index, stream=self._stream())
        else:
            self.z = _CEngine(cfg, plugin=plugin, log=log, ranks=ranks, comm=comm)
        self.stage = 3 if self.z.plugin == "stage3" else self.stage
        self._partitioned = self.z.plugin == "stage3"
        # "libzero": below stage 3 the model's tensors become views of libzero's
        # own copy (zero_param_storage): no second copy, no copy per step
        self._views = param_storage == "libzero" and not self._partitioned

        # parameter groups (deepspeed.initialize's model_parameters, or the torch optimizer's)
        if torch_groups is not None:
            groups = torch_groups
        elif model_parameters is None:
            groups = [{"params": [p for p in model.parameters() if p.requires_grad]}]
        else:
            mp = list(model_parameters)
            groups = [dict(g) for g in mp] if mp and isinstance(mp[0], dict) else [{"params": mp}]
        names = {id(p): n for n, p in model.named_parameters()}
        # (1.10) mixture of experts: DeepSpeed's expert parameters (allreduce=False) in groups of their own,
        # each an expert group of libzero over the ranks that hold the same experts
        groups, experts = _moe_groups(groups, torch_groups is None and model_parameters is None, names)
        for gi, ep in sorted(experts.items()):
            world = self.z.world_size
            if world % ep:
                raise ValueError("zero.torch: param_groups[%d] is an expert group of expert-parallel size %d, which "
                                 "does not divide the %d data-parallel ranks" % (gi, ep, world))
            # DeepSpeed's layout: expert-parallel groups of E consecutive ranks, so the ranks that hold the
            # same experts (one expert-data-parallel group) are those with the same rank % E
            self.z.set_group(gi, expert_color=self.z.rank % ep)
        self._experts = experts  # group index -> expert-parallel size (a modifier block's group of ranks)
        osec = cfg.get("optimizer") or {}
        oparams = osec.get("params") or {}
        otype = str(osec.get("type", "adam")).lower()  # no section: libzero runs DeepSpeed's default Adam
        defaults = {"lr": oparams.get("lr", 1e-3), "weight_decay": oparams.get("weight_decay", 0.0)}
        fixed = {}
        if otype in _ADAM_FAMILY:
            # always present, at libzero's own defaults: torch's OneCycleLR (cycle_momentum)
            # looks for "betas" in defaults and cycles beta1, which reaches libzero
            defaults["betas"] = tuple(oparams.get("betas", _ADAM_DEFAULTS["betas"]))
            if otype != "lion":
                defaults["eps"] = oparams.get("eps", _ADAM_DEFAULTS["eps"])
        elif otype == "sgd":
            # libzero's SGD momentum is set at initialize only: a scheduler that cycles it is refused at step
            fixed = {"momentum": oparams.get("momentum", 0.0), "nesterov": bool(oparams.get("nesterov", False))}
            defaults.update(fixed)
        if otype == "adamw" and "weight_decay" not in oparams:
            self._wd_note = True
        for i, g in enumerate(groups):
            g["params"] = list(g["params"])
            for k, v in defaults.items():
                g.setdefault(k, v)
        self.optimizer = _Optimizer(groups, defaults, engine=self, fixed=fixed)

        self._params = []       # torch parameters, registration order
        self._zp = {}           # id(param) -> zero.Param
        self._names = {}        # id(param) -> its name in libzero's messages
        self._dtypes = {}       # id(param) -> its dtype at registration (libzero's memory is laid out in it)
        self._shape = {}
        self._hooks = []
        self._acc_nodes = []
        seen = set()
        order = {id(p): k for k, p in enumerate(model.parameters())}
        flat = []
        for gi, g in enumerate(groups):
            for p in g["params"]:
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    flat.append((order.get(id(p), 1 << 30), gi, p))
        flat.sort(key=lambda t: t[0])
        for _, gi, p in flat:
            if p.device != self.device:
                raise ZeroError(11, "rank %d: zero.torch trains on %s but parameter %s is on %s"
                                % (self.z.rank, self.device, names.get(id(p), "?"), p.device), "zero.torch")
            if not p.is_contiguous():
                p.data = p.data.contiguous()
            name = names.get(id(p), "param%d" % len(self._params))
            zp = self.z.register(name, p.data_ptr(), numel=p.numel(), dtype=str(p.dtype), group=gi,
                                 host_owned=not self._partitioned and not self._views,
                                 device=self.device.type, shape=tuple(p.shape))
            self._params.append(p)
            self._zp[id(p)] = zp
            self._names[id(p)] = name
            self._dtypes[id(p)] = p.dtype
            self._shape[id(p)] = p.shape
        self.z.params_done()
        if self._views:
            with torch.no_grad():
                for p in self._params:
                    zp = self._zp[id(p)]
                    p.data = self._tensor_at(self.z.storage_address(zp), zp.numel, p.dtype).view(p.shape)
        self._materialized = set()
        self._gathered = {}     # stage 3: storage address of a gathered copy -> its parameter
        self._gathered_at = {}  # stage 3: id(param) -> that address (the block may replace p.data)
        self._in_backward = False
        self._in_gathered = 0   # gathered_parameters() blocks open (nested): their own phase, parameters held
        self._reported = set()  # id(param) whose gradient went to libzero in this micro-step
        self._gathered_version = {}  # stage 3: id(param) -> its version counter when gathered
        self._prints = {}       # stage 3: id(param) -> _fingerprint when a read-only block gathered it
        self._written = []      # stage 3: names of parameters written while gathered
        self._forward_wrapped = None
        for p in self._params:  # while the tensors have their full shape: autograd records it
            self._install_grad_hook(p)
        if self._partitioned:
            for p in self._params:
                p.data = self._empty(p.dtype)
            self._install_module_hooks(model)
            self._install_forward_wrapper(model)
            self._install_copy_guards(model)
        # libzero starts from the config's values: push only what a group sets differently
        self.optimizer._pushed = [{k: (tuple(v) if k == "betas" else v) for k, v in defaults.items()
                                   if k not in fixed} for _ in groups]
        if getattr(self, "_wd_note", False) and self.z.rank == 0:
            _warn_once("adamw_wd", "zero.torch: the config's optimizer AdamW has no \"weight_decay\": libzero uses "
                       "DeepSpeed's default 0 (torch.optim.AdamW's is 0.01); set optimizer.params.weight_decay "
                       "to say which you mean")
        self.optimizer._sync(self.z)
        self._note_params()
        me = weakref.ref(self)
        for p in self._params:
            _engine_of_param[id(p)] = me
        _guard_clipping()
        _guard_grad_scaler()
        _guard_wrappers()
        self.last_result = None
        self._last_boundary = None  # the last boundary's StepResult (get_global_grad_norm, was_step_applied)
        self.lr_scheduler = None  # initialize sets a ConfigScheduler when the config has a "scheduler"
        if broadcast_buffers:
            self._install_buffer_broadcast(model)
        self.micro_steps = 0
        self._phase = "train"  # stage 3's gather-order phase (zero_set_phase), kept by train()/eval()

    # ------------------------------------------------------------------ memory
    def _stream(self):
        """torch's current CUDA stream as libzero's stream argument (None on CPU)."""
        return torch.cuda.current_stream(self.device).cuda_stream if self._cuda else None

    def _tensor_at(self, address, numel, dtype):
        """A 1-D torch tensor over libzero's memory at `address` (no copy):
        host memory through a ctypes buffer, device memory through DLPack."""
        if not self._cuda and not self.DLPACK_ON_CPU:
            nbytes = numel * torch.empty(0, dtype=dtype).element_size()
            return torch.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype)
        return _dlpack_tensor(address, numel, dtype, self.device)

    def _empty(self, dtype):
        return torch.empty(0, dtype=dtype, device=self.device)

    # ------------------------------------------------------------------ setup
    def _group_ranks(self, group):
        """World ranks of a torch.distributed group, in group-rank order (None:
        the whole MPI world).  libzero talks MPI: the torch world must be the
        MPI world, rank for rank."""
        if group is None:
            return None
        import torch.distributed as dist
        mpi_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "-1")))
        mpi_size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "-1")))
        if not L.under_mpi_launcher() or dist.get_rank() != mpi_rank or dist.get_world_size() != mpi_size:
            raise ZeroError(11, "rank %d: a torch.distributed group needs the torch world to be the MPI world "
                                "rank for rank (launch with mpirun; torch rank %d of %d, MPI rank %d of %d)"
                            % (mpi_rank, dist.get_rank(), dist.get_world_size(), mpi_rank, mpi_size), "zero.torch")
        if hasattr(dist, "get_process_group_ranks"):
            ranks = list(dist.get_process_group_ranks(group))
        else:  # torch < 2.0: global rank -> group rank
            from torch.distributed import distributed_c10d as c10d
            m = c10d._pg_group_ranks[group] if group is not dist.group.WORLD else {
                r: r for r in range(dist.get_world_size())}
            ranks = [g for g, _ in sorted(m.items(), key=lambda kv: kv[1])]
        return None if ranks == list(range(mpi_size)) else ranks

    def _install_buffer_broadcast(self, model):
        """(1.8) broadcast_buffers=True: as torch DDP does by default, every
        training-mode forward of the model first takes global rank 0's
        buffers (BatchNorm's running statistics...), all of them packed into
        one zero_broadcast; eval-mode forwards do not.  The forward is then
        collective: every rank runs it."""
        def pre(mod, inputs):
            if mod.training:
                self._broadcast_buffers()
        self._hooks.append(model.register_forward_pre_hook(pre))

    def _broadcast_buffers(self):
        bufs = [b for b in self.module.buffers() if b.numel()]
        if not bufs:
            return
        with torch.no_grad():
            flat = torch.cat([b.detach().contiguous().reshape(-1).view(torch.uint8) for b in bufs])
            self.z.broadcast(flat.data_ptr(), flat.numel(), 0)
            at = 0
            for b in bufs:
                n = b.numel() * b.element_size()
                b.copy_(flat[at:at + n].view(b.dtype).view(b.shape))
                at += n

    def _install_grad_hook(self, p):
        def on_grad(param=p):
            self._grad_ready(param)
        if hasattr(p, "register_post_accumulate_grad_hook"):
            self._hooks.append(p.register_post_accumulate_grad_hook(lambda param: on_grad(param)))
        else:  # torch < 2.1: the AccumulateGrad node's post hook
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(acc.register_hook(lambda grad_inputs, grad_outputs, param=p: on_grad(param)))
            self._acc_nodes.append(acc)  # the node lives as long as someone holds it

    def _rehook(self, p):
        """After p.data went to another dtype and back (a modifier block's
        refused tensor): torch < 2.1 then gives p a new AccumulateGrad node,
        without the hook _install_grad_hook put on the old one, and p's
        gradients would no longer reach libzero.  Hooks the new node."""
        if hasattr(p, "register_post_accumulate_grad_hook"):  # on the tensor: kept
            return
        held = p.data
        if held.shape != self._shape[id(p)]:  # stage 3's empty tensor: a new node records the shape it sees
            p.data = torch.empty(self._shape[id(p)], dtype=held.dtype, device=held.device)
        try:
            with torch.enable_grad():
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                if all(acc is not a for a in self._acc_nodes):
                    self._install_grad_hook(p)
        finally:
            p.data = held

    def _grad_ready(self, p):
        g = p.grad
        if g is None:
            return
        zp = self._zp[id(p)]
        if id(p) in self._reported:  # before the add: libzero's buffer may be reduced already
            raise ZeroError(17, "rank %d: a second gradient for '%s' before engine.step() (torch-style gradient "
                                "accumulation, two backward passes per step?): set \"gradient_accumulation_steps\": "
                                "N in the config and call engine.step() after every backward; libzero sums the "
                                "micro-batches and steps the optimizer at every N-th call"
                            % (self.z.rank, self._names[id(p)]), "zero.torch")
        if not self._in_backward and self.z.loss_scale != 1.0:
            # loss.backward() instead of engine.backward(loss): the loss was not
            # multiplied by the loss scale, which libzero divides the gradient by
            raise ZeroError(10, "rank %d: a gradient for '%s' arrived outside engine.backward() while fp16 loss "
                                "scaling is on (scale %g): loss.backward() does not multiply the loss by the scale, "
                                "and libzero divides every gradient by it; call engine.backward(loss)"
                            % (self.z.rank, self._names[id(p)], self.z.loss_scale), "zero.torch")
        if g.dtype != self._dtypes[id(p)] or g.device != self.device or g.numel() != zp.numel:
            # a view of libzero's buffer in another dtype or size would write past it
            self._refuse_replaced([p], "its gradient is %s %s on %s, libzero's buffer %d x %s on %s"
                                  % (tuple(g.shape), g.dtype, g.device, zp.numel, self._dtypes[id(p)], self.device))
        addr = self.z.grad_buffer_address(zp)
        with torch.no_grad():
            buf = self._tensor_at(addr, zp.numel, g.dtype)
            buf.add_(g.reshape(-1))  # ADD: the buffer may hold earlier micro-batches
        p.grad = None  # libzero has it now: no full gradient stays behind
        # CUDA: the add is queued on the current stream; libzero's reduction waits for it by event
        self.z.on_grad_ready(zp, stream=self._stream())
        self._reported.add(id(p))
        if self._partitioned:
            self._drop([p])

    def _install_module_hooks(self, model):
        # Modules whose forward reads their children's parameters directly
        # (nn.MultiheadAttention uses out_proj.weight without calling
        # out_proj) gather their whole subtree; their children get no hooks.
        whole = tuple(WHOLE_SUBTREE_MODULES)
        skip = set()
        for m in model.modules():
            if id(m) in skip:
                continue
            if isinstance(m, whole):
                own = [p for p in m.parameters() if id(p) in self._zp]
                skip.update(id(c) for c in m.modules())
            else:
                own = [p for p in m.parameters(recurse=False) if id(p) in self._zp]
            if not own:
                continue

            def pre(mod, inputs, own=own):
                self._fetch(own)

            def post(mod, inputs, output, own=own):
                # In backward a forward runs again only to recompute activations
                # (torch.utils.checkpoint): what it saves needs the parameters
                # until their gradients are handed over, which empties them.
                # Inside gathered_parameters() they stay for the block.
                if not self._in_backward and not self._in_gathered:
                    self._drop(own)
                if torch.is_grad_enabled():
                    for t in _tensors(output):
                        if t.requires_grad:
                            t.register_hook(lambda grad, own=own: (self._fetch(own), None)[1])
                return None

            self._hooks.append(m.register_forward_pre_hook(pre))
            self._hooks.append(m.register_forward_hook(post))
        # model.state_dict() would hold the empty tensors of parameters not
        # gathered now (torch.save of it: a checkpoint without weights)
        for m in model.modules():
            if any(id(p) in self._zp for p in m.parameters(recurse=False)):
                self._hooks.append(m._register_state_dict_hook(self._state_dict_hook))

    def _state_dict_hook(self, module, state_dict, prefix, local_metadata):
        empty = [self._names[id(p)] for p in module.parameters(recurse=False)
                 if id(p) in self._zp and id(p) not in self._materialized]
        if empty:
            raise ZeroError(10, "rank %d: state_dict() at stage 3 would hold empty tensors: each rank keeps a shard "
                                "of '%s'%s in libzero and the model's tensors are empty between uses; take it inside "
                                "'with engine.gathered_parameters():' on every rank (collective), or save a libzero "
                                "checkpoint with engine.save()"
                            % (self.z.rank, empty[0], " and %d more" % (len(empty) - 1) if len(empty) > 1 else ""),
                            "zero.torch")
        return None

    # ------------------------------------------------------------------ copies of a stage-3 module
    # Torch habits that copy the whole module: copy.deepcopy(model) for an EMA
    # or an eval copy, torch.save(model), a module handed to another process.
    # At stage 3 the module's tensors are empty between uses and carry
    # zero.torch's hooks and forward wrapper, which close over this engine:
    # deepcopy failed inside ctypes ("ctypes objects containing pointers
    # cannot be pickled"), torch.save on a hook ("Can't pickle local
    # object"), neither saying why or what to do.  Each module that holds
    # engine parameters gets instance attributes __deepcopy__ and
    # __reduce_ex__ (looked up on the instance by copy and pickle): outside
    # gathered_parameters() they refuse with ZERO_ERR_STATE and say what to
    # use; inside it they give a plain module -- the full values, none of
    # zero.torch's hooks or wrapper -- which is what an EMA copy or a pickled
    # model needs.  close() removes them.

    _COPY_HOOKS = ("__deepcopy__", "__reduce_ex__")

    def _install_copy_guards(self, model):
        self._copy_guarded = []
        self._module_names = {id(m): "module '%s'" % n if n else "the model" for n, m in model.named_modules()}
        for m in model.modules():
            if any(id(p) in self._zp for p in m.parameters()):
                m.__dict__["__deepcopy__"] = functools.partial(self._deepcopy_module, m)
                m.__dict__["__reduce_ex__"] = functools.partial(self._reduce_module, m)
                self._copy_guarded.append(m)

    def _remove_copy_guards(self):
        for m in getattr(self, "_copy_guarded", ()):
            for k in self._COPY_HOOKS:
                f = m.__dict__.get(k)
                if isinstance(f, functools.partial) and f.func.__self__ is self:
                    del m.__dict__[k]
        self._copy_guarded = []

    def _refuse_copy(self, m, how):
        empty = [self._names[id(p)] for p in m.parameters() if id(p) in self._zp and id(p) not in self._materialized]
        if not empty:
            return
        raise ZeroError(10, "rank %d: %s of %s at stage 3 would copy empty tensors: each rank keeps a shard of '%s'%s "
                            "in libzero and the module's tensors are empty between uses; inside 'with "
                            "engine.gathered_parameters():' (every rank, collective) it gives a plain module with "
                            "the full values and none of zero.torch's hooks (an EMA or eval copy); for a checkpoint "
                            "use engine.save(), or model.state_dict() inside that block"
                        % (self.z.rank, how, self._module_names.get(id(m), type(m).__name__), empty[0],
                           " and %d more" % (len(empty) - 1) if len(empty) > 1 else ""), "zero.torch")

    @contextlib.contextmanager
    def _plain(self, m):
        """m's subtree without zero.torch's hooks, forward wrapper and copy
        guards for the block (restored after, in their order)."""
        attrs, dicts = [], {}
        wrapper = self._forward_wrapped[0] if self._forward_wrapped else None
        for s in m.modules():
            for k in self._COPY_HOOKS + ("forward",):
                v = s.__dict__.get(k)
                if v is not None and (k != "forward" or v is wrapper):
                    attrs.append((s, k, v))
        for h in self._hooks:
            refs = [getattr(h, "hooks_dict_ref", None)] + list(getattr(h, "extra_dict_ref", ()) or ())
            for r in refs:
                d = r() if r is not None else None
                if d is not None and h.id in d:
                    dicts.setdefault(id(d), (d, list(d.items())))
                    del d[h.id]
        for s, k, _ in attrs:
            del s.__dict__[k]
        try:
            yield
        finally:
            for s, k, v in attrs:
                s.__dict__[k] = v
            for d, items in dicts.values():
                d.clear()
                d.update(items)

    def _deepcopy_module(self, m, memo):
        self._refuse_copy(m, "copy.deepcopy")
        with self._plain(m):
            return copy.deepcopy(m, memo)

    def _reduce_module(self, m, protocol):
        # pickle (torch.save(model), multiprocessing) and copy.copy: a plain copy's reduction
        self._refuse_copy(m, "pickling (torch.save(model), copy.copy, another process)")
        with self._plain(m):
            plain = copy.deepcopy(m)
        return plain.__reduce_ex__(protocol)

    # ------------------------------------------------------------------ the host's writes
    # libzero keeps its own copy of every parameter for the optimizer and
    # writes the model's tensors itself (host-owned: in place at each step;
    # libzero storage: the tensors are its memory; stage 3: gathered scratch
    # copies).  A write by the host is lost at the next step, silently unless
    # someone looks: load_state_dict after initialize, an in-place update under
    # no_grad, a second torch optimizer stepping the same tensors.  libzero's
    # own writes go around torch, so a parameter's version counter moves only
    # when the host writes it; a conversion (model.double(), .to(), .cuda())
    # swaps the tensor itself.

    def _note_params(self):
        """Remember each parameter's tensor and version counter (after
        initialize and after load)."""
        self._seen = {id(p): (p.data_ptr(), p._version) for p in self._params}

    def _refuse_replaced(self, params, detail):
        raise ZeroError(10, "rank %d: parameter(s) %s were converted or moved after zt.initialize (%s; "
                            "model.to(), .half(), .double(), .cuda(), p.data = ...): libzero's memory for them "
                            "is laid out as registered; convert or move the model before zt.initialize"
                        % (self.z.rank, _name_list(self._names[id(p)] for p in params), detail), "zero.torch")

    def _check_params(self, call):
        """Raise ZERO_ERR_STATE before libzero would overwrite (or save
        without) a change the host made to the parameters since initialize."""
        replaced, written = [], list(self._written)
        if not self._partitioned:
            for p in self._params:
                ptr, ver = self._seen[id(p)]
                if p.data_ptr() != ptr or p.dtype != self._dtypes[id(p)]:
                    replaced.append(self._names[id(p)])
                elif p._version != ver:
                    written.append(self._names[id(p)])
        frozen = [self._names[id(p)] for p in self._params if not p.requires_grad]
        why = []
        if replaced:
            why.append("parameter(s) %s were replaced by other tensors after zt.initialize (model.to(), .half(), "
                       ".double(), .cuda(), p.data = ...): libzero updates the tensors it registered, not these; "
                       "convert or move the model before zt.initialize" % _name_list(replaced))
        if written:
            where = ("while gathered (engine.gathered_parameters(), a module's forward): stage 3 keeps each "
                     "rank's shard in libzero and the gathered tensors are copies"
                     if self._partitioned else
                     "after zt.initialize (load_state_dict, copy_, an in-place update under no_grad, another "
                     "optimizer's step): libzero keeps its own copy of the parameters for the optimizer and "
                     "writes the model's tensors from it at each step")
            why.append("parameter(s) %s were written %s, so the change would be lost; load weights before "
                       "zt.initialize, or from a libzero checkpoint with engine.load()" % (_name_list(written), where))
        if frozen:
            why.append("parameter(s) %s no longer require a gradient (requires_grad_(False) after zt.initialize): "
                       "libzero registered them as trainable and would go on stepping them (momentum, weight "
                       "decay); freeze parameters before zt.initialize" % _name_list(frozen))
        if why:
            raise ZeroError(10, "rank %d: %s" % (self.z.rank, "; ".join(why)), "zero.torch " + call)

    def _install_forward_wrapper(self, model):
        """Stage 3: wrap the model's forward (an instance attribute, removed by
        close(), so that engine(x) and model(x) both go through it) to

        1. name the gather phase from the model's mode: a forward in eval mode
           or without autograd (model.eval(), torch.no_grad()) gathers in
           another order than training's forward + backward, and stage 3
           records one order per phase (zero_set_phase); engine.eval() did
           this, the torch habit model.eval() did not, so stage 3 warned and
           re-recorded its training order every epoch.  A stage-3 forward is
           collective already, so the phase switch (collective) is at the
           same point on every rank;

        2. run it under autograd saved-tensor hooks that save a tensor viewing
           a gathered parameter as a _SavedParamView.  Linear saves weight.t()
           (a view, not the parameter), so without them each gathered copy
           stays referenced by the graph after the module's forward hook
           empties the parameter, and the torch side holds the whole model at
           the end of forward.  In backward the hook on the module's outputs
           has gathered the parameter again (same values: nothing steps
           between a forward and its backward); unpack views that copy."""
        gathered = self._gathered

        def pack(t):
            if gathered:
                try:
                    p = gathered.get(_storage_ptr(t))
                except Exception:  # no storage (sparse, wrapper tensors): kept as it is, as without the hooks
                    return t
                if p is not None and t.dtype == p.dtype:
                    return _SavedParamView(p, t)
            return t

        def unpack(x):
            if type(x) is _SavedParamView:
                p = x.param
                self._fetch([p])  # normally a no-op: the output hook gathered it before this backward
                return p.data.as_strided(x.size, x.stride, x.offset)
            return x

        inner = model.forward
        had_own = "forward" in model.__dict__
        refs = self.SAVED_PARAM_REFS

        @functools.wraps(inner)
        def forward(*args, **kwargs):
            self._phase_from_mode()
            if not refs:
                return inner(*args, **kwargs)
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                return inner(*args, **kwargs)

        model.forward = forward
        self._forward_wrapped = (forward, inner if had_own else None)

    def _phase_from_mode(self):
        """Stage 3, at a forward: the phase "train" (training mode with
        autograd) or "eval" (anything else), unless the host named another."""
        if (self._phase not in ("train", "eval") or self._in_gathered or self._in_backward
                or "zero_set_phase" in L.lib().zero_missing):
            return  # a phase the host named itself, or no phases (a 1.0 libzero)
        want = "train" if self.module.training and torch.is_grad_enabled() else "eval"
        if want != self._phase:
            self.z.set_phase(want)
            self._phase = want

    def _remove_forward_wrapper(self):
        if self._forward_wrapped is None:
            return
        forward, own = self._forward_wrapped
        self._forward_wrapped = None
        if self.module.__dict__.get("forward") is forward:  # not replaced since: put back what was there
            if own is None:
                del self.module.forward
            else:
                self.module.forward = own

    def _fetch(self, params):
        """Stage 3: gather params' full values into torch tensors (collective)."""
        need = [p for p in params if id(p) not in self._materialized]
        if not need:
            return
        moved = [p for p in need if p.dtype != self._dtypes[id(p)] or p.device != self.device]
        if moved:  # before the gather: a copy out of libzero's memory in another dtype would read past it
            self._refuse_replaced(moved, "now %s on %s, registered %s on %s" % (
                moved[0].dtype, moved[0].device, self._dtypes[id(moved[0])], self.device))
        zps = [self._zp[id(p)] for p in need]
        addrs = self.z.gather_addresses(zps)
        try:
            with torch.no_grad():
                for p, zp, a in zip(need, zps, addrs):
                    p.data = self._tensor_at(a, zp.numel, p.dtype).clone().view(self._shape[id(p)])
                    self._materialized.add(id(p))
                    self._gathered_version[id(p)] = p._version
                    if p.numel():
                        self._gathered_at[id(p)] = _storage_ptr(p.data)
                        self._gathered[self._gathered_at[id(p)]] = p
        finally:
            self.z.release(zps)

    def _drop(self, params):
        for p in params:
            if id(p) in self._materialized:
                if p._version != self._gathered_version.get(id(p), p._version):
                    self._written.append(self._names[id(p)])
                # by the address gathered: a modifier block may have replaced p.data since
                self._gathered.pop(self._gathered_at.pop(id(p), None), None)
                p.data = self._empty(p.dtype)
                self._materialized.discard(id(p))

    # ------------------------------------------------------------------ training
    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    forward = __call__

    def backward(self, loss, retain_graph=False):
        """loss.backward(), the loss multiplied by libzero's loss scale (fp16).
        Every parameter's gradient goes to libzero as soon as it is final."""
        scale = self.z.loss_scale
        self._in_backward = True
        try:
            (loss * scale if scale != 1.0 else loss).backward(retain_graph=retain_graph)
        finally:
            self._in_backward = False
        if self._partitioned:  # params whose gradient never came are emptied too
            self._drop(list(self._params))

    def step(self):
        """zero_step: once per micro-batch; at the accumulation boundary libzero
        reduces, clips, steps and writes the new parameters.  Returns the
        zero.StepResult (also in .last_result).  The same as optimizer.step()
        (through it, so that a torch lr scheduler counts the step)."""
        return self.optimizer.step()

    def _step(self):
        self._check_params("zero_step")
        self.optimizer._sync(self.z)
        self._reported = set()  # a new micro-step, whether this step succeeds or not
        try:
            r = self.z.step(stream=self._stream())
        except ZeroError as ex:
            if ex.status_name != "ZERO_ERR_LOSS_SCALE":
                raise
            self.micro_steps += 1
            raise NonFiniteGradientError(ex.status, ex.message, ex.call) from None
        self.micro_steps += 1
        self.last_result = r
        if r.boundary:
            self._last_boundary = r
        # without a dynamic loss scaler (fp32, bf16) an overflow is a non-finite gradient nothing absorbs
        if r.overflow and self.raise_on_nonfinite and self.dtype != torch.float16:
            # libzero's text names the rank(s) that found it and the param, the same on every rank
            where = self.z.last_error()
            where = where[where.find("non-finite"):] if "non-finite" in where else ""
            raise NonFiniteGradientError(
                14, "rank %d: non-finite gradient (Inf/NaN) at global step %d (%s model, no loss scaling): libzero "
                "skipped the optimizer step (grad_norm %g)%s; pass raise_on_nonfinite=False to get "
                "step().overflow instead" % (self.z.rank, r.global_step + 1, str(self.dtype).replace("torch.", ""),
                                             r.grad_norm, ": " + where if where else ""), "zero_step", result=r)
        return r

    def zero_grad(self):
        """Gradients live in libzero: nothing to clear (DeepSpeed compatibility)."""

    def train(self, mode=True):
        self.module.train(mode)
        if "zero_set_phase" not in L.lib().zero_missing:  # a 1.0 libzero has no phases
            self._phase = "train" if mode else "eval"
            self.z.set_phase(self._phase)
        return self

    def eval(self):
        return self.train(False)

    # ------------------------------------------------------------------ gathered_parameters blocks
    @contextlib.contextmanager
    def gathered_parameters(self, params=None, modifier_rank=None):
        """Full values of parameters inside the block: `params` (this
        engine's parameters, an iterable or one tensor; None: all of them).
        Yields them as a list.  Stage 3 gathers them into the model's tensors
        (collective: every rank enters the block), in a stage-3 phase of its
        own ("gathered_parameters", so the training order stage 3 prefetches
        by is kept), and empties them again at the end; a forward inside the
        block leaves what it gathers gathered until then.  Other stages: the
        model's own tensors, nothing to gather.

        modifier_rank=None: read-only.  A write is refused (ZERO_ERR_STATE):
        at stage 3 at the block's end, on the other stages at the next step.

        modifier_rank=r (DeepSpeed's GatheredParameters(modifier_rank=r); r
        is a rank of the data-parallel group: the global rank of a plain
        run, for an expert parameter its place in its expert-data-parallel
        group): what the block leaves in the parameters' tensors on rank r
        becomes their value on every rank and in every copy libzero keeps
        (zero_params_write, ABI 1.10: broadcast from r, the fp32 master of
        a 16-bit model widened from it, optimizer states kept); the other
        ranks' changes are discarded.  Write in place -- p.data[...] = ...,
        p.data.copy_(...), nn.init.*_(p) under torch.no_grad() -- or replace
        p.data by a tensor of the same shape, dtype and device.  Collective.
        Open it between accumulation windows, after the engine.step() that
        ends one: inside a window (between backward and step, or between
        the micro-steps of gradient_accumulation_steps) libzero refuses it
        with ZERO_ERR_STATE on every rank, at the block's start.  An
        exception inside the block writes nothing, on every rank: the rank
        it was raised on refuses the collective write (the others learn it
        at once, a ZeroError naming that rank, instead of waiting in the
        write until comm_timeout) and re-raises its exception; a change the
        block made before it is then refused at the next step, as any write
        outside a modifier block is."""
        block = self._block_params(params)
        root = self._modifier_root(block, modifier_rank)
        if not block:
            yield block
            return
        if root is not None:
            self._check_writable(root)
        with (self._stage3_block if self._partitioned else self._host_block)(block, root):
            yield block

    def _block_params(self, params):
        """A block's parameters, each once, in registration order: the order
        zero_params_write needs the same on every rank, whatever order the
        caller listed them in.  A tensor this engine does not train is
        refused: libzero holds no copy of it to gather or write."""
        if params is None:
            return list(self._params)
        if isinstance(params, torch.Tensor):
            params = [params]
        mine, foreign = {}, []
        for p in params:
            if id(p) in self._zp:
                mine[id(p)] = p
            elif all(p is not f for f in foreign):
                foreign.append(p)
        if foreign:
            raise ValueError("rank %d: gathered_parameters: %s not trained by this engine (frozen when "
                             "zt.initialize ran, another model's, or not a parameter): libzero holds no copy of "
                             "them; leave them out of the block" % (self.z.rank, _describe(self.module, foreign)))
        return sorted(mine.values(), key=lambda p: self._zp[id(p)].index)

    def _group_of(self, p):
        """(this rank's place, size) of p's data-parallel group: the
        engine's ranks, or for an expert parameter the ranks that hold the
        same experts (DeepSpeed's layout: rank % E alike, in rank order)."""
        ep = self._experts.get(self._zp[id(p)].group)
        if ep is None:
            return self.z.rank, self.z.world_size
        return self.z.rank // ep, self.z.world_size // ep

    def _modifier_root(self, block, modifier_rank):
        """modifier_rank checked against every block parameter's group (the
        same verdict on every rank: refused before any collective)."""
        if modifier_rank is None:
            return None
        if isinstance(modifier_rank, bool) or not hasattr(modifier_rank, "__index__"):
            raise TypeError("gathered_parameters: modifier_rank must be an int (a rank of the data-parallel group) "
                            "or None, not %r" % (modifier_rank,))
        root = modifier_rank.__index__()
        for p in block:
            _, size = self._group_of(p)
            if not 0 <= root < size:
                raise ValueError("rank %d: gathered_parameters(modifier_rank=%d): not a rank of the data-parallel "
                                 "group of parameter '%s'%s, whose %d rank(s) are 0 to %d"
                                 % (self.z.rank, root, self._names[id(p)],
                                    " (an expert parameter: its expert-data-parallel group)"
                                    if size != self.z.world_size else "", size, size - 1))
        return root

    def _check_writable(self, root):
        """At a modifier block's start, zero_params_write of no parameter:
        libzero judges it as the real write and agrees the verdict over the
        ranks (three small all-reduces), so a block that could not be written
        -- inside an accumulation window, or a plugin without write_params --
        is refused on every rank before the block's code changes anything."""
        L.require("zero_params_write", "gathered_parameters(modifier_rank=)")
        try:
            self.z.params_write([], None, root)
        except ZeroError as ex:
            raise self._write_error(ex, root) from None

    def _write_error(self, ex, root):
        """libzero's refusal of a modifier block, its message kept, with what to do."""
        hint = ("; open the modifier block after the engine.step() that ends an accumulation window, not between "
                "engine.backward() and engine.step()" if ex.status_name == "ZERO_ERR_STATE" else "")
        if "refused the call" in ex.message:
            hint += ("; a rank whose modifier block raised an exception refuses the write this way: its exception "
                     "says what went wrong")
        return ZeroError(ex.status, ex.message + hint, "zero.torch gathered_parameters(modifier_rank=%d)" % root)

    def _value_of(self, p):
        """p's tensor as zero_params_write's values for p (contiguous, in
        its registered shape, dtype and device), or None when the block
        replaced it by a tensor libzero cannot take."""
        t = p.data
        if t.dtype != self._dtypes[id(p)] or t.device != self.device or t.shape != self._shape[id(p)]:
            return None
        return t.contiguous()

    def _refuse_block(self, block):
        """The block raised on this rank: the other ranks are entering
        zero_params_write for it, so this rank enters it too, with a root
        libzero refuses (-1), and every rank learns the refusal from the
        call's agreement at once -- nothing written anywhere -- instead of
        waiting in the write until comm_timeout.  The caller re-raises the
        block's exception; libzero's refusal of it is not news."""
        try:
            self.z.params_write([self._zp[id(p)] for p in block], None, -1)
        except ZeroError:
            pass

    def _write_block(self, block, root):
        """zero_params_write of a modifier block's parameters from place
        `root` of their groups.  Every rank offers its tensors and libzero
        reads the root's.  A tensor it cannot take goes as NULL: on the root
        libzero then refuses the call on every rank (nothing written), on
        another rank it is not read (its changes are discarded anyway)."""
        values = [self._value_of(p) for p in block]
        if self._cuda:  # the block's writes are queued on torch's stream; libzero copies on its own
            torch.cuda.current_stream(self.device).synchronize()
        try:
            self.z.params_write([self._zp[id(p)] for p in block], values, root)
        except ZeroError as ex:
            unfit = [p for p, v in zip(block, values) if v is None and self._group_of(p)[0] == root]
            if not unfit:
                raise self._write_error(ex, root) from None
            p = unfit[0]
            raise ZeroError(1, "rank %d: parameter(s) %s: the block replaced the tensor by one of shape %s, %s on "
                               "%s, but libzero holds it as %s, %s on %s (fixed at zt.initialize); write it in place "
                               "(p.data[...] = ..., p.data.copy_(...)) or replace it by a tensor of the same shape, "
                               "dtype and device; nothing was written"
                            % (self.z.rank, _name_list(self._names[id(q)] for q in unfit), tuple(p.data.shape),
                               p.data.dtype, p.data.device, tuple(self._shape[id(p)]), self._dtypes[id(p)],
                               self.device), "zero.torch gathered_parameters(modifier_rank=%d)" % root) from None

    @contextlib.contextmanager
    def _host_block(self, block, root):
        """Stages 0-2 and offload: the model's tensors are the parameters.
        A modifier block writes rank `root`'s into libzero at its end, and
        libzero writes them back into every rank's tensors."""
        if root is None:
            yield
            return
        own = {id(p): p.data for p in block}  # the registered tensors, put back if the block replaced one

        def put_back():
            for p in block:
                t = own[id(p)]
                if p.data_ptr() != t.data_ptr() or p.dtype != t.dtype or p.shape != t.shape:
                    p.data = t
                    self._rehook(p)
        try:
            yield
        except BaseException:
            self._refuse_block(block)
            put_back()
            raise
        try:
            self._write_block(block, root)
        finally:
            put_back()
        for p in block:  # libzero wrote these itself: not a write the next step's check must refuse
            self._seen[id(p)] = (self._seen[id(p)][0], p._version)

    @contextlib.contextmanager
    def _stage3_block(self, block, root):
        """Stage 3: the block's parameters gathered until its end.  A
        modifier block then writes rank `root`'s gathered tensors into
        libzero (which holds nothing by then: _fetch releases at once), and
        the copies are emptied as after a read-only block."""
        before = set(self._materialized)  # gathered already: a module's forward the block runs inside
        with self._gathered_phase():
            self._fetch(block)
            mine = [p for p in block if id(p) not in before] if root is None else []
            for p in mine:  # read-only: writes through p.data, which no version counter sees, by a fingerprint
                self._prints[id(p)] = _fingerprint(p.data)
            self._in_gathered += 1  # a forward in the block leaves what it gathers gathered
            try:
                try:
                    yield
                except BaseException:
                    if root is not None:
                        self._refuse_block(block)
                    raise
                if root is not None:
                    self._write_block(block, root)
                    self._absorb(block)
            finally:
                self._in_gathered -= 1
                self._note_data_writes(mine)
                self._drop([p for p in self._params if id(p) in self._materialized and id(p) not in before])
                if root is not None:
                    for p in block:  # a tensor of another kind was not written: the parameter stays as registered
                        if p.dtype != self._dtypes[id(p)] or p.device != self.device:
                            p.data = self._empty(self._dtypes[id(p)])
                            self._rehook(p)
            stale = [p for p in block if id(p) in before] if root is not None else []
            if stale:  # gathered before the block, they hold this rank's values, not rank root's
                self._drop(stale)
                self._fetch(stale)
                for p in stale:  # what a read-only block around this one must find unchanged at its end
                    if id(p) in self._prints:
                        self._prints[id(p)] = _fingerprint(p.data)
        if self._written:  # said at the block's end, not only at the next step
            self._check_params("gathered_parameters")

    @contextlib.contextmanager
    def _gathered_phase(self):
        """Stage 3's phase "gathered_parameters" around the outermost block
        (collective, like the gather): gathering these parameters is not the
        training order, which stage 3 records per phase for prefetching and
        warns about when it changes; back to the engine's phase after (as
        eval and generate passes have theirs, issue 34), without hiding the
        error that ended the block."""
        phased = not self._in_gathered and "zero_set_phase" not in L.lib().zero_missing
        if phased:
            self.z.set_phase("gathered_parameters")
        try:
            yield
        except BaseException:
            if phased:
                try:
                    self.z.set_phase(self._phase)
                except ZeroError:
                    pass
            raise
        if phased:
            self.z.set_phase(self._phase)

    def _note_data_writes(self, params):
        """Stage 3, at the end of the read-only block that gathered `params`:
        those whose values changed without moving their version counter
        (p.data[...] = ..., p.data.copy_(...), p.data = another tensor) were
        written, and the write would be lost with the gathered copy: refused
        as _drop refuses the writes it sees."""
        for p in params:
            print_ = self._prints.pop(id(p), None)
            if (print_ is None or id(p) not in self._materialized
                    or p._version != self._gathered_version.get(id(p), p._version)):
                continue  # emptied already (a backward in the block), or a write _drop reports itself
            t = p.data
            if (t.dtype != self._dtypes[id(p)] or t.shape != self._shape[id(p)] or t.device != self.device
                    or _fingerprint(t) != print_):
                self._written.append(self._names[id(p)])

    def _absorb(self, block):
        """Stage 3, after a modifier block's write: libzero holds the block's
        values, so emptying their gathered copies loses no write; a write
        lost earlier (in a read-only block) is superseded too."""
        names = set()
        for p in block:
            self._gathered_version[id(p)] = p._version
            names.add(self._names[id(p)])
        self._written = [n for n in self._written if n not in names]

    def save(self, directory, tag=None, client_state=None, keep_last=0):
        """zero_save (zero_save_ex with a tag, keep_last or a client state).
        With the parameters and libzero's optimizer state the checkpoint
        holds (1.8) the module's persistent buffers (BatchNorm's running
        statistics, registered tables: before 1.8 they were not saved, and
        a resumed model ran with fresh ones) and `client_state`, any object
        torch.save takes, in one pickle that libzero stores as the host's
        client state (ABI 1.7).  Global rank 0's is the one kept; libzero
        warns when the ranks' differ (a BatchNorm whose statistics differ
        between ranks, or different client states).  The param_groups'
        hyper-parameters go to libzero first (as at a step): a scheduler
        stepped after the last step() has set the lr the next step uses,
        which is what a resumed run must start with (before 1.8 the
        checkpoint kept the last step's, and a StepLR resumed from it
        stayed one decay behind for good).  Collective."""
        self._check_params("zero_save")
        self.optimizer._sync(self.z)
        blob = None
        if "zero_client_state" not in L.lib().zero_missing:
            buf = io.BytesIO()
            torch.save({"format": _BLOB_FORMAT, "client_state": client_state,
                        "buffers": {k: b.detach().cpu().clone() for k, b in _persistent_buffers(self.module).items()}},
                       buf)
            blob = buf.getvalue()
        elif client_state is not None:
            L.require("zero_client_state", "save(client_state=)")
        self.z.save(directory, tag=tag, keep_last=keep_last, client_state=blob)

    def load(self, directory, weights_only=False):
        """zero_load; host-owned parameters receive the checkpoint's values,
        the module's persistent buffers the saved ones (1.8), and libzero
        the saving run's hyper-parameters (zero_set_hparams settings, ABI
        1.4): optimizer.param_groups are set to them, so a resumed run
        steps as the saving run did.  A backward not yet followed by step()
        is dropped (1.7.5): run the next one afresh.  Returns the client
        state saved with the checkpoint ({} when none; the raw bytes of a
        checkpoint a C host saved).  The client state is a pickle: like
        torch.load, load only checkpoints you trust.  Collective.

        weights_only=True (1.9, ABI 1.8; DeepSpeed's load_module_only): the
        module alone -- parameters and persistent buffers -- from a
        checkpoint of any world size, stage or micro-step; the optimizer
        starts over (states zero, step 0, the lr schedule and loss scaler
        from the start) and param_groups keep this run's settings.  For
        fine-tuning from a trained checkpoint."""
        self.z.load(directory, weights_only=weights_only)
        # (1.7.5) libzero dropped the micro-step in progress (a backward
        # without its step): the next backward's gradients are its first
        self._reported = set()
        self._written = []  # the checkpoint's values are the parameters' now
        self._note_params()
        if not weights_only:
            self.optimizer._adopt(_checkpoint_hparams(directory))
        return self._restore_blob(self.z.client_state(), directory)

    def _restore_blob(self, blob, directory):
        """The client state out of zero.torch's blob, the buffers into the module."""
        if blob is None:
            return {}
        try:
            try:
                saved = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)
            except TypeError:  # a torch without weights_only (< 1.13)
                saved = torch.load(io.BytesIO(blob), map_location="cpu")
        except Exception:  # not a torch pickle: a C host's own bytes
            return blob
        if not (isinstance(saved, dict) and saved.get("format") == _BLOB_FORMAT):
            return saved
        mine = _persistent_buffers(self.module)
        theirs = saved.get("buffers") or {}
        missing, extra = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
        if missing or extra:
            warnings.warn("load: the checkpoint in %s holds buffers %s the model lacks and lacks %s the model has; "
                          "those were left as they are (another model's checkpoint?)"
                          % (os.fspath(directory), extra or "none", missing or "none"), stacklevel=3)
        with torch.no_grad():
            for k in sorted(set(mine) & set(theirs)):
                if mine[k].shape != theirs[k].shape:
                    raise ValueError("load: buffer %r is %s in the checkpoint, %s in the model"
                                     % (k, tuple(theirs[k].shape), tuple(mine[k].shape)))
                mine[k].copy_(theirs[k])
        cs = saved.get("client_state")
        return {} if cs is None else cs

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin", exclude_frozen_parameters=False):
        """DeepSpeed's save_16bit_model: the whole model's state_dict (every
        parameter full, in the model's dtype, and the buffers) as one
        torch.save file, save_dir/save_filename, for inference or another
        framework.  Stage 3 gathers the parameters for it; collective (every
        rank calls it), global rank 0 writes (a temp file renamed into
        place: a reader never sees half a file).  exclude_frozen_parameters
        leaves out parameters with requires_grad False.  Returns True."""
        path = os.path.join(os.fspath(save_dir), save_filename)
        frozen = set()
        if exclude_frozen_parameters:
            frozen = {n for n, p in self.module.named_parameters() if not p.requires_grad}
        with self.gathered_parameters():
            if self.z.rank == 0:
                # copies: outside the block stage 3's gathered tensors are emptied
                sd = {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items() if k not in frozen}
                os.makedirs(os.fspath(save_dir), exist_ok=True)
                tmp = "%s.tmp.%d" % (path, os.getpid())
                try:
                    torch.save(sd, tmp)
                    os.replace(tmp, path)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
        return True

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True,
                        exclude_frozen_parameters=False):
        """DeepSpeed's save_checkpoint: save() under save_dir (tag None:
        "step-<global step>") with `client_state` (any object torch.save
        takes: a step counter, the LR scheduler's and data loader's
        state_dict, RNG states) saved with it, atomically: it is in the
        checkpoint `latest` names, or neither is.  Global rank 0's
        client_state is the one saved (as in DeepSpeed); every rank should
        pass the same, and libzero warns when they differ.  Collective.
        Returns True.  `save_latest=False` and `exclude_frozen_parameters`
        are refused (ValueError): libzero always moves `latest` with a
        complete checkpoint, and saves every registered parameter."""
        if not save_latest:
            raise ValueError("save_checkpoint(save_latest=False): libzero always points save_dir/latest at the "
                             "checkpoint it completed (docs/checkpoints.md); save into another save_dir instead")
        if exclude_frozen_parameters:
            raise ValueError("save_checkpoint(exclude_frozen_parameters=True): a libzero checkpoint holds every "
                             "parameter the engine trains; frozen ones (requires_grad False) are not in it anyway")
        self.save(save_dir, tag=tag, client_state=client_state)
        return True

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True, load_optimizer_states=True,
                        load_lr_scheduler_states=True, load_module_only=False, custom_load_fn=None):
        """DeepSpeed's load_checkpoint: load() of load_dir/tag, or of the
        checkpoint load_dir/latest names (tag None).  Returns (path of the
        checkpoint directory, client_state): the object save_checkpoint
        saved, unpickled on the CPU ({} for a checkpoint saved without
        one).  As in DeepSpeed, a load_dir with no checkpoint at all (no
        `latest`, no manifest.json) and tag None returns (None, None) with
        a warning, so `if path is None: start fresh` works; any other
        failure raises.  The client state is a pickle: like torch.load,
        load only checkpoints you trust.  Collective.

        load_module_only=True, or load_optimizer_states=False together with
        load_lr_scheduler_states=False (1.9): the module alone, for
        fine-tuning -- load(weights_only=True): the optimizer, the step and
        the lr schedule start over.  Refused (ValueError): one of
        load_optimizer_states / load_lr_scheduler_states False without the
        other (libzero keeps the step, the schedule and the optimizer
        together), load_module_strict=False (the model must match) and
        custom_load_fn."""
        weights_only = load_module_only or (not load_optimizer_states and not load_lr_scheduler_states)
        partial = [k for k, v in (("load_module_strict=False", not load_module_strict),
                                  ("load_optimizer_states=False", not load_optimizer_states and not weights_only),
                                  ("load_lr_scheduler_states=False",
                                   not load_lr_scheduler_states and not weights_only),
                                  ("custom_load_fn", custom_load_fn is not None)) if v]
        if partial:
            raise ValueError("load_checkpoint(%s): a libzero load restores the whole training state (parameters, "
                             "optimizer state, step, lr schedule) or, with load_module_only=True, the module "
                             "alone (the optimizer, step and schedule start over); the model must match"
                             % ", ".join(partial))
        path = os.fspath(load_dir)
        if tag is not None:
            path = os.path.join(path, str(tag))
        try:
            state = self.load(path, weights_only=weights_only)
        except ZeroError as err:
            if tag is None and "no checkpoint in" in err.message:
                warnings.warn("load_checkpoint: no checkpoint in %s (neither latest nor manifest.json); "
                              "returning (None, None)" % path, stacklevel=2)
                return None, None
            raise
        return _checkpoint_dir(path), state

    def set_lr(self, lr, group=None):
        groups = self.optimizer.param_groups if group is None else [self.optimizer.param_groups[group]]
        for g in groups:
            g["lr"] = lr

    # ---- DeepSpeed's engine accessors (1.8): the names a ported loop calls ----
    def _info(self):
        """zero_engine_info_get (ABI 1.7); None from an older libzero."""
        return None if "zero_engine_info_get" in L.lib().zero_missing else self.z.info()

    def _need_info(self, what):
        i = self._info()
        if i is None:
            L.require("zero_engine_info_get", what)
        return i

    @property
    def global_steps(self):
        """DeepSpeed's global_steps: accumulation boundaries passed, skipped
        (overflow) steps included, as DeepSpeed counts them; a checkpoint's
        after load.  libzero's own count of steps taken is
        state["global_step"] (= global_steps - skipped_steps)."""
        i = self._need_info("global_steps")
        return i["global_step"] + i["skipped_steps"]

    @property
    def skipped_steps(self):
        """Boundaries whose step was skipped (a non-finite gradient)."""
        return self._need_info("skipped_steps")["skipped_steps"]

    @property
    def global_samples(self):
        """DeepSpeed's global_samples: global_steps x train_batch_size()."""
        i = self._need_info("global_samples")
        return (i["global_step"] + i["skipped_steps"]) * i["train_batch_size"]

    def gradient_accumulation_steps(self):
        return self._need_info("gradient_accumulation_steps()")["gradient_accumulation_steps"]

    def train_micro_batch_size_per_gpu(self):
        return self._need_info("train_micro_batch_size_per_gpu()")["train_micro_batch_size_per_gpu"]

    def train_batch_size(self):
        return self._need_info("train_batch_size()")["train_batch_size"]

    def is_gradient_accumulation_boundary(self):
        """Whether the next step() (the one after this micro-batch's
        backward) ends the accumulation window: the optimizer steps there."""
        i = self._need_info("is_gradient_accumulation_boundary()")
        return i["micro_step"] + 1 >= i["gradient_accumulation_steps"]

    def get_lr(self):
        """The lr for the next step, one per param group: the config's
        "scheduler" as libzero computes it, or, without one,
        optimizer.param_groups' (which a torch scheduler sets)."""
        if self.config.get("scheduler"):
            lr = self._need_info("get_lr()")["lr"]
            return [lr for _ in self.optimizer.param_groups]
        return [g["lr"] for g in self.optimizer.param_groups]

    def get_global_grad_norm(self):
        """The gradient norm of the last optimizer step (before clipping), or
        None before the first accumulation boundary."""
        r = self._last_boundary
        return None if r is None else r.grad_norm

    def was_step_applied(self):
        """Whether the last accumulation boundary stepped (False: skipped,
        a non-finite gradient; also False before the first boundary)."""
        r = self._last_boundary
        return bool(r is not None and r.taken)

    def zero_optimization_stage(self):
        return self.stage

    @property
    def state(self):
        """Where training stands: global step, loss scale, last step's result, memory."""
        r = self.last_result
        i = self._info()
        step = i["global_step"] if i is not None else (r.global_step if r else 0)
        return {"global_step": step, "micro_steps": self.micro_steps,
                "loss_scale": self.z.loss_scale, "lr": r.lr if r else None,
                "grad_norm": r.grad_norm if r else None, "overflow": r.overflow if r else False,
                "stage": self.stage, "plugin": self.z.plugin, "rank": self.z.rank,
                "world_size": self.z.world_size, "memory": self.z.memory_stats()}

    @property
    def loss_scale(self):
        return self.z.loss_scale

    @property
    def global_rank(self):
        return self.z.rank

    @property
    def world_size(self):
        return self.z.world_size

    def memory_stats(self):
        return self.z.memory_stats()

    def parameters(self):
        return self.module.parameters()

    def close(self):
        """Destroy the libzero engine (collective).  The model keeps its final
        values (stage 3: gathered; param_storage="libzero": copied out of
        libzero's memory first)."""
        if self.z._e is None:
            return
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._acc_nodes = []
        self._remove_forward_wrapper()
        self._remove_copy_guards()
        for p in self._params:
            if _engine_of_param.get(id(p)) is not None and _engine_of_param[id(p)]() is self:
                del _engine_of_param[id(p)]
        with torch.no_grad():
            if self._partitioned:
                # the final gather in a phase of its own, as gathered_parameters():
                # not the training order stage 3 records (and would warn about)
                if "zero_set_phase" not in L.lib().zero_missing:
                    self.z.set_phase("gathered_parameters")
                # a parameter converted or moved since initialize (refused by
                # training) still gets its values: gathered as registered, then
                # converted as asked
                moved = {id(p): (p.dtype, p.device) for p in self._params
                         if p.dtype != self._dtypes[id(p)] or p.device != self.device}
                for p in self._params:
                    if id(p) in moved:
                        self._materialized.discard(id(p))
                        p.data = self._empty(self._dtypes[id(p)])
                self._fetch(self._params)
                for p in self._params:
                    if id(p) in moved:
                        p.data = p.data.to(device=moved[id(p)][1], dtype=moved[id(p)][0])
                self._materialized.clear()
                self._gathered.clear()
                self._gathered_at.clear()
            elif self._views:
                for p in self._params:
                    p.data = p.data.clone()
        self.z.close()


_BLOB_FORMAT = "zero.torch checkpoint state 1"  # what save() stores as libzero's client state


def _persistent_buffers(module):
    """name -> tensor of the module's buffers that state_dict saves (not the
    non-persistent ones), each once."""
    out, seen = {}, set()
    for mname, m in module.named_modules():
        for bname, b in m._buffers.items():
            if b is None or bname in getattr(m, "_non_persistent_buffers_set", ()) or id(b) in seen:
                continue
            seen.add(id(b))
            out[(mname + "." if mname else "") + bname] = b
    return out


def _checkpoint_dir(directory):
    """The checkpoint directory zero_load reads for `directory`: itself when
    it holds manifest.json, else the one its `latest` names (None when
    neither can be read here)."""
    path = os.fspath(directory)
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    try:
        with open(os.path.join(path, "latest")) as f:
            return os.path.join(path, f.read().strip())
    except OSError:
        return None


def _checkpoint_hparams(directory):
    """The "state.hparams" of the checkpoint zero_load read from `directory`
    (the checkpoint itself, or a root whose `latest` names it); None when the
    manifest has none (written before libzero 1.4) or cannot be read here."""
    path = _checkpoint_dir(directory)
    if path is None:
        return None
    try:
        with open(os.path.join(path, "manifest.json")) as f:
            return (json.load(f).get("state") or {}).get("hparams")
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- offline: a checkpoint's weights
def _zero_ckpt_tool():
    """The zero-ckpt tool: $ZERO_CKPT, the one bundled with the package (pip
    install), the build or install tree of the loaded libzero (<build>/tools,
    <prefix>/bin), then PATH."""
    cands = [os.environ.get("ZERO_CKPT")]
    if _tools.bin_dir():
        cands.append(os.path.join(_tools.bin_dir(), "zero-ckpt"))
    lib = L.loaded_path()
    if lib:
        d = os.path.dirname(os.path.realpath(lib))
        cands += [os.path.join(d, "..", "tools", "zero-ckpt"), os.path.join(d, "..", "bin", "zero-ckpt")]
    cands.append(shutil.which("zero-ckpt"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.normpath(c)
    raise OSError("zero-ckpt not found (set ZERO_CKPT to its path; it is bundled by pip install, and built as "
                  "<build>/tools/zero-ckpt)")


def _read_safetensors(path):
    """{name: tensor} of a safetensors file of F32 tensors (what zero-ckpt consolidate writes)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t.get("dtype") != "F32":
            raise ValueError("%s: tensor %r is %s, expected F32" % (path, name, t.get("dtype")))
        lo, hi = t["data_offsets"]
        flat = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.float32) if hi > lo else torch.empty(0)
        out[name] = flat.reshape(t["shape"])
    return out


def get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=None):
    """DeepSpeed's get_fp32_state_dict_from_zero_checkpoint: the fp32
    weights of a libzero checkpoint (the optimizer's master copy), as
    {parameter name: CPU tensor}, without an engine, at any world size,
    stage or pipeline split: `zero-ckpt consolidate` (every byte verified)
    into a temporary safetensors file, read back.  checkpoint_dir: a
    checkpoint directory or a root whose `latest` names one (tag: a
    checkpoint under the root).  Each tensor has the shape its parameter was
    registered with (zero.torch: the module's, since 1.8; flat [numel] for
    a checkpoint of an older libzero).  Tied weights appear once, under
    the name they were registered with; buffers are not in it
    (load_state_dict_from_zero_checkpoint keeps the model's)."""
    path = os.fspath(checkpoint_dir)
    if tag is not None:
        path = os.path.join(path, str(tag))
    with tempfile.TemporaryDirectory(prefix="zero-fp32-") as d:
        out = os.path.join(d, "model.safetensors")
        r = subprocess.run([_zero_ckpt_tool(), "consolidate", path, out], capture_output=True, text=True)
        if r.returncode != 0:
            raise ValueError("zero-ckpt consolidate %s failed (exit %d): %s"
                             % (path, r.returncode, (r.stderr or r.stdout).strip()))
        return _read_safetensors(out)


def load_state_dict_from_zero_checkpoint(model, checkpoint_dir, tag=None):
    """DeepSpeed's load_state_dict_from_zero_checkpoint: the checkpoint's
    fp32 weights into `model` (a plain torch module, not an engine's: for
    inference, export, or a fresh run), converted to its parameters'
    dtypes; tied parameters get the weight once registered; buffers keep
    the model's own values (a libzero checkpoint holds them in zero.torch's
    client state: engine.load restores them).  A parameter the checkpoint
    lacks, or one of another size, is a ValueError naming it.  Returns
    model."""
    sd = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag)
    first = {}
    full = {}
    missing = []
    for name, t in model.state_dict(keep_vars=True).items():
        if not isinstance(t, torch.nn.Parameter):
            continue  # a buffer
        src = sd.get(name)
        if src is None and id(t) in first:
            src = sd.get(first[id(t)])
        first.setdefault(id(t), name)
        if src is None:
            if t.requires_grad:  # a frozen parameter was never registered: it keeps the model's value
                missing.append(name)
            continue
        if src.numel() != t.numel():
            raise ValueError("load_state_dict_from_zero_checkpoint: %r has %d elements in the checkpoint, %d in "
                             "the model" % (name, src.numel(), t.numel()))
        full[name] = src.reshape(t.shape)
    if missing:
        raise ValueError("load_state_dict_from_zero_checkpoint: the checkpoint has no %s (another model's "
                         "checkpoint, or parameters frozen when it was trained)" % ", ".join(missing))
    model.load_state_dict(full, strict=False)
    return model


def _tensors(obj):
    if torch.is_tensor(obj):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


_DS_ONLY = {"training_data": "build your own DataLoader (zero.torch returns None in its place)",
            "lr_scheduler": "build the scheduler on the optimizer initialize returns, e.g. "
                            "torch.optim.lr_scheduler.StepLR(optimizer, ...), or use the config's \"scheduler\"",
            "collate_fn": "it goes with training_data, which zero.torch does not take",
            "mpu": "libzero has no model-parallel unit; pass process_group= for a data-parallel group",
            "args": "pass the config as config=", "config_params": "pass the config as config=",
            "dist_init_required": "zero.torch uses mpirun's world or an initialised torch.distributed",
            "distributed_port": "zero.torch uses mpirun's world or an initialised torch.distributed"}


def initialize(model, config, *, optimizer=None, plugin=None, model_parameters=None, process_group=None, log=None,
               param_storage="host", device=None, raise_on_nonfinite=True, comm="auto", broadcast_buffers=False,
               **unsupported):
    """Like deepspeed.initialize: returns (engine, optimizer, None,
    lr_scheduler): lr_scheduler is a ConfigScheduler reporting the config's
    "scheduler" (libzero runs it), or None without one.

    model: a torch.nn.Module on the CPU (converted to fp16/bf16 when the
    config enables them).  config: DeepSpeed config dict, JSON text or path.
    plugin: libzero plugin name (default: from the config).  model_parameters:
    parameters or param-group dicts ("params", "lr", "weight_decay", "betas",
    "eps"), each a libzero param group.  process_group: a torch.distributed
    group (its ranks train together; every MPI rank initializes at the same
    time, each with its own group).  param_storage: "host" (default; the
    model's tensors are host-owned parameters, updated in place by a copy at
    each step) or "libzero" (below stage 3 the model's tensors become views of
    libzero's own copy: no second copy of the parameters, no copy per step;
    the model must not replace them).  device: None (where the model's
    parameters are: CPU or one CUDA device), or "cpu" / "cuda" / "cuda:N" /
    a torch.device (the model is moved there; "cuda" picks the launcher's
    local rank modulo the visible GPUs).  raise_on_nonfinite: True (default)
    step() raises NonFiniteGradientError for Inf/NaN gradients that no loss
    scaler absorbs (fp32/bf16 at once; fp16 at min_loss_scale, where libzero
    refuses anyway); False: step() returns overflow=True and training goes
    on with the step skipped.  comm: "auto" (the MPI world under mpirun; on
    CUDA NCCL made over MPI; without mpirun the torch.distributed group:
    process_group, else the default group when torch.distributed is
    initialised), "mpi" (CUDA: the MPI communicator with device buffers
    staged through host memory; works with several ranks on one GPU),
    "self", "torch" (the default torch.distributed group), or a
    torch.distributed group.  Every rank must build the model with the
    same initial values (seed it).  A job started without mpirun whose
    WORLD_SIZE > 1 but torch.distributed is not initialised is refused
    with ZeroError (each process would train alone).  broadcast_buffers
    (1.8): True makes every training-mode forward take global rank 0's
    buffers first (BatchNorm statistics), as torch DDP does by default;
    False (default, as DeepSpeed): each rank keeps its own, and a
    checkpoint keeps rank 0's.  CPU engines.

    optimizer: a torch.optim.Adam, AdamW or SGD (momentum, nesterov) built
    on the model's parameters: translated into libzero's optimizer, its
    param_groups (lr, betas, eps, weight_decay each) becoming libzero's
    param groups.  What libzero would run differently is refused with
    ValueError naming the reason (another optimizer type, amsgrad, maximize,
    dampening, momentum differing between groups, an optimizer that has
    already stepped); foreach / fused / capturable only pick torch's
    implementation and are ignored.  A config that has its own "optimizer"
    section must say the same (else ValueError: which one wins would be a
    guess).  DeepSpeed's other initialize arguments (training_data,
    lr_scheduler, mpu, ...) are refused with TypeError saying what to do
    instead, never ignored."""
    if unsupported:
        raise TypeError("zero.torch.initialize does not take %s" % "; ".join(
            "%s= (%s)" % (k, _DS_ONLY.get(k, "unknown argument")) for k in sorted(unsupported)))
    e = ZeroEngine(model, config, plugin=plugin, model_parameters=model_parameters, process_group=process_group,
                   log=log, param_storage=param_storage, device=device, raise_on_nonfinite=raise_on_nonfinite,
                   comm=comm, optimizer=optimizer, broadcast_buffers=broadcast_buffers)
    sched = ConfigScheduler(e) if e.config.get("scheduler") and "zero_engine_info_get" not in L.lib().zero_missing \
        else None
    e.lr_scheduler = sched
    return e, e.optimizer, None, sched


class ConfigScheduler:
    """(1.8) What initialize returns as its fourth element when the config
    has a "scheduler" section (DeepSpeed returns its scheduler there):
    libzero runs that schedule itself, stepping it at every optimizer step
    and saving it in checkpoints, so this object only reports it.
    get_last_lr() / get_lr(): the lr of the next step, one per param group
    (zero_engine_info); state_dict() describes the position (global step);
    load_state_dict() checks that a saved position matches the engine's
    (engine.load restores the schedule with the checkpoint).  step() is
    refused: a second stepping of the schedule (DeepSpeed's engine steps it
    too, and calling step() there as well is a double step)."""

    def __init__(self, engine):
        self._engine = weakref.ref(engine)
        self.type = engine.config["scheduler"].get("type")

    def _e(self):
        e = self._engine()
        if e is None:
            raise ValueError("zero.torch: the engine of this scheduler is gone")
        return e

    def get_last_lr(self):
        return self._e().get_lr()

    def get_lr(self):
        return self._e().get_lr()

    @property
    def last_batch_iteration(self):
        """DeepSpeed's counter: optimizer steps taken, minus one (-1 before the first)."""
        return self._e().state["global_step"] - 1

    def state_dict(self):
        return {"type": self.type, "last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, state_dict):
        if state_dict.get("last_batch_iteration") != self.last_batch_iteration:
            raise ValueError("zero.torch: the schedule is libzero's and comes back with engine.load() / "
                             "load_checkpoint(); this state (step %s) is not where the engine stands (step %s): "
                             "load the checkpoint it was saved with" % (state_dict.get("last_batch_iteration"),
                                                                       self.last_batch_iteration))

    def step(self, *args, **kwargs):
        raise ValueError("zero.torch: libzero steps the config's %r schedule at every optimizer step itself; "
                         "calling step() would be a second step (remove the call, as with DeepSpeed's engine)"
                         % self.type)
