"""Engine: the C calls of abi/zero.h as Python methods (no torch needed)."""
import contextlib
import ctypes
import json
import os
import threading
import weakref

from . import _lib as L

_DTYPES = {"f32": L.DTYPE_F32, "float32": L.DTYPE_F32, "fp32": L.DTYPE_F32,
           "bf16": L.DTYPE_BF16, "bfloat16": L.DTYPE_BF16,
           "f16": L.DTYPE_F16, "float16": L.DTYPE_F16, "fp16": L.DTYPE_F16}
_DTYPE_NAMES = {L.DTYPE_F32: "f32", L.DTYPE_BF16: "bf16", L.DTYPE_F16: "f16"}
_ITEMSIZE = {L.DTYPE_F32: 4, L.DTYPE_BF16: 2, L.DTYPE_F16: 2}
# memoryview formats: memoryview cannot cast to f16 ("e") and has no bf16: 16-bit types give raw bits (H)
_FORMAT = {L.DTYPE_F32: "f", L.DTYPE_BF16: "H", L.DTYPE_F16: "H"}


class ZeroError(RuntimeError):
    """A libzero call failed.  `status` is the code, `status_name` its name
    ("ZERO_ERR_CONFIG", ...), `message` libzero's text ("rank 0: ...")."""

    def __init__(self, status, message, call=""):
        self.status = int(status)
        self.status_name = L.STATUS_NAMES.get(self.status, "ZERO_ERR_%d" % self.status)
        self.message = message
        self.call = call
        super().__init__("%s%s: %s" % (call + ": " if call else "", self.status_name, message))


def status_string(s):
    return L.lib().zero_status_string(int(s)).decode()


def abi_version():
    """(major, minor) of the loaded library."""
    v = L.lib().zero_abi_version()
    return v // 10000, v % 10000


def version():
    return L.lib().zero_version_string().decode()


def _dtype(d):
    if isinstance(d, int):
        return d
    try:
        return _DTYPES[str(d).replace("torch.", "")]
    except KeyError:
        raise ValueError("unknown dtype %r (f32, bf16 or f16)" % (d,)) from None


def view(address, numel, dtype="f32"):
    """A zero-copy memoryview of `numel` elements of `dtype` at `address`."""
    dt = _dtype(dtype)
    arr = (ctypes.c_char * (int(numel) * _ITEMSIZE[dt])).from_address(int(address))
    return memoryview(arr).cast("B").cast(_FORMAT[dt])


def _address(obj, writable):
    """Address of a buffer-protocol object or an int address; returns
    (address, keepalive)."""
    if obj is None:
        return None, None
    if isinstance(obj, int):
        return obj, None
    if hasattr(obj, "data_ptr"):  # a torch tensor
        return obj.data_ptr(), obj
    mv = memoryview(obj)
    if not mv.c_contiguous:
        raise ValueError("parameter buffers must be C-contiguous")
    if mv.readonly:
        if writable:
            raise ValueError("a host-owned parameter needs a writable buffer")
        keep = ctypes.create_string_buffer(mv.tobytes(), mv.nbytes)
        return ctypes.addressof(keep), keep
    arr = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return ctypes.addressof(arr), (arr, mv)


class Param:
    """A registered parameter (handle owned by its engine)."""
    __slots__ = ("engine", "handle", "name", "numel", "dtype", "group", "host_owned", "_keep", "index", "layers")

    def __init__(self, engine, handle, name, numel, dtype, group, host_owned, keep, index):
        self.engine, self.handle, self.name, self.numel = engine, handle, name, numel
        self.dtype, self.group, self.host_owned, self._keep, self.index = dtype, group, host_owned, keep, index

    def __repr__(self):
        return "Param(%r, numel=%d, %s, group=%d%s)" % (self.name, self.numel, _DTYPE_NAMES[self.dtype],
                                                         self.group, ", host_owned" if self.host_owned else "")


class StepResult:
    """What zero_step reports (zero_step_result)."""
    __slots__ = ("boundary", "taken", "overflow", "global_step", "grad_norm", "loss_scale", "lr")

    def __init__(self, r):
        self.boundary, self.taken, self.overflow = bool(r.boundary), bool(r.taken), bool(r.overflow)
        self.global_step, self.grad_norm, self.loss_scale, self.lr = (int(r.global_step), r.grad_norm,
                                                                      r.loss_scale, r.lr)

    def __repr__(self):
        return ("StepResult(boundary=%s, taken=%s, overflow=%s, global_step=%d, grad_norm=%g, loss_scale=%g, "
                "lr=%g)" % (self.boundary, self.taken, self.overflow, self.global_step, self.grad_norm,
                            self.loss_scale, self.lr))


_live = weakref.WeakSet()
_live_lock = threading.Lock()


_serial = [0]


def _close_all():
    """At exit (before MPI_Finalize): close the engines still open, newest
    first, the same order on every rank (destroy is collective)."""
    with _live_lock:
        engines = sorted(_live, key=lambda e: e._serial, reverse=True)
    for e in engines:
        e.close()


_atexit_done = []


def _close_at_exit():
    """Host-communicator engines: destroy is collective and runs callbacks
    through torch.distributed, so it must not wait for garbage collection
    (a different moment on every rank): engines still open at exit are
    closed newest first, while torch.distributed is still up."""
    if not _atexit_done:
        import atexit
        atexit.register(_close_all)
        _atexit_done.append(True)


_COMMS = {"auto": L.COMM_AUTO, "mpi": L.COMM_MPI, "self": L.COMM_SELF, "nccl": L.COMM_NCCL, "host": L.COMM_HOST}


def _host_comm(comm, ranks):
    """The zero.TorchHostComm for Engine's comm= (a torch.distributed group,
    "torch" for the default group, or a TorchHostComm itself)."""
    from . import _hostcomm
    if ranks is not None:
        raise ValueError("ranks= selects MPI ranks; with a torch.distributed group pass the group itself")
    if isinstance(comm, _hostcomm.TorchHostComm):
        return comm
    if comm != "torch" and not type(comm).__module__.startswith("torch"):
        raise ValueError("comm must be a string, a torch.distributed process group or a zero.TorchHostComm, "
                         "not %r" % (comm,))
    try:
        return _hostcomm.TorchHostComm(None if comm == "torch" else comm)
    except RuntimeError as ex:
        raise ZeroError(11, str(ex), "zero_engine_create") from None


class Engine:
    """One libzero engine.

    config: a DeepSpeed config as a dict, JSON text, or a path to a .json file.
    plugin: plugin name or path (default: from the config / $ZERO_PLUGIN).
    comm:   "auto" (the MPI world when launched by mpirun; else the default
            torch.distributed group when torch.distributed is initialised
            with more than one rank; else one process), "mpi", "self",
            "torch" (the default torch.distributed group), a
            torch.distributed process group, or a zero.TorchHostComm: the
            group's collectives as libzero's communicator (ABI 1.5
            ZERO_COMM_HOST, no mpirun needed; zero/_hostcomm.py).
    log:    None (libzero's stderr lines) or a callable(level, rank, message).
    device: "cpu" or "cuda" (device_kind CUDA: parameters, gradients and
            optimizer state in device memory; grad buffers and gathers
            return device addresses); device_index: the CUDA ordinal
            (default: local rank modulo the visible GPUs).
    stream: (CUDA) the host's compute stream as an int cudaStream_t
            (zero_engine_options.stream; None = the legacy default stream).
    ranks:  MPI world ranks to train over (a data-parallel group), in order;
            None = the whole world.  Every world rank then creates an engine
            at the same time (the split is collective over the world), each
            with the group it belongs to.
    Collective: every rank creates it, and destroying it (close(), the end
    of a `with` block) is collective too: close engines explicitly, in the
    same order on every rank; garbage collection may run at different times
    on different ranks.  Engines still open at exit are closed newest first.
    """

    def __init__(self, config, plugin=None, comm="auto", device="cpu", device_index=L.DEVICE_INDEX_AUTO,
                 log=None, ranks=None, stream=None):
        lib = L.lib()
        self._lib = lib
        self._e = None
        self._params = []
        o = L.EngineOptions()
        ctypes.memset(ctypes.byref(o), 0, ctypes.sizeof(o))
        o.struct_size = ctypes.sizeof(o)
        if isinstance(config, dict):
            o.config_json = json.dumps(config).encode()
        elif isinstance(config, (str, os.PathLike)) and str(config).lstrip().startswith("{"):
            o.config_json = str(config).encode()
        elif isinstance(config, (str, os.PathLike)):
            o.config_path = os.fspath(config).encode()
        else:
            raise TypeError("config must be a dict, JSON text or a path")
        self._hostcomm = None
        if comm == "auto" and not L.under_mpi_launcher() and ranks is None:
            from . import _hostcomm
            if _hostcomm.default_group_active():
                comm = "torch"
        self._own_hostcomm = False
        if not isinstance(comm, str) or comm == "torch":
            self._hostcomm = _host_comm(comm, ranks)
            self._own_hostcomm = self._hostcomm is not comm  # made here, not the caller's to reuse
            comm = "host"
        kind = _COMMS.get(comm) if isinstance(comm, str) else None
        if kind is None:
            raise ValueError("comm must be one of %s, a torch.distributed group or a zero.TorchHostComm"
                             % sorted(_COMMS))
        if kind == L.COMM_AUTO:
            kind = L.COMM_AUTO if L.under_mpi_launcher() else L.COMM_SELF
        if kind in (L.COMM_AUTO, L.COMM_MPI):
            if not L.ensure_mpi(_close_all):
                raise ZeroError(8, "could not initialise MPI (libmpi not loadable)", "zero_engine_create")
            if kind == L.COMM_MPI and ranks is None:
                # "mpi" means MPI even on a CUDA engine (device buffers staged
                # through host memory), where "auto" makes NCCL: hand libzero
                # the whole world as an explicit MPI communicator
                ranks = list(range(L.mpi_rank_size()[1]))
            kind = L.COMM_AUTO  # MPI_COMM_WORLD
        sub = None
        if kind == L.COMM_HOST:
            o.comm = self._hostcomm.address
            _close_at_exit()
        elif ranks is not None:
            if kind != L.COMM_AUTO:
                raise ValueError("ranks= needs MPI (launch with mpirun)")
            me = L.mpi_rank_size()[0]
            if me not in [int(r) for r in ranks]:
                raise ValueError("this process (MPI world rank %d) is not in ranks %r" % (me, list(ranks)))
            sub = L.mpi_split(ranks, me)
            kind = L.COMM_MPI
            o.comm = ctypes.addressof(sub)
        o.comm_kind = kind
        o.device_kind = L.DEVICE_CUDA if device == "cuda" else L.DEVICE_CPU
        o.device_index = device_index
        o.stream = stream
        o.plugin = plugin.encode() if plugin else None
        self._log_cb = None
        if log is not None:
            def _cb(user, level, rank, msg, _log=log):
                try:
                    _log(int(level), int(rank), msg.decode(errors="replace"))
                except Exception:  # never let an exception cross into C
                    pass
            self._log_cb = L.LOG_FN(_cb)
            o.log_fn = self._log_cb
        err = ctypes.create_string_buffer(8192)
        h = ctypes.c_void_p()
        s = lib.zero_engine_create(ctypes.byref(o), ctypes.byref(h), err, len(err))
        if sub is not None:
            L.mpi_free(sub)  # libzero works on its own duplicate
        if s != 0:
            raise ZeroError(s, err.value.decode(errors="replace") + self._host_error(), "zero_engine_create")
        self._e = h
        self._frozen = False
        with _live_lock:
            _serial[0] += 1
            self._serial = _serial[0]
            _live.add(self)

    # -------------------------------------------------------------- basics
    def _check(self, s, call):
        if s != 0:
            raise ZeroError(s, self.last_error() + self._host_error(), call)

    def _host_error(self):
        """The torch.distributed exception behind a failed host-comm callback."""
        hc = self._hostcomm
        if hc is None or not hc.last_error:
            return ""
        msg, hc.last_error = hc.last_error, ""
        return " [%s]" % msg

    def _handle(self):
        if self._e is None:
            raise ZeroError(10, "the engine is closed", "libzero")
        return self._e

    def last_error(self):
        return self._lib.zero_last_error(self._e).decode(errors="replace") if self._e else ""

    @property
    def rank(self):
        return self._lib.zero_rank(self._handle())

    @property
    def world_size(self):
        return self._lib.zero_world_size(self._handle())

    @property
    def plugin(self):
        return self._lib.zero_plugin_name(self._handle()).decode()

    @property
    def loss_scale(self):
        return self._lib.zero_loss_scale(self._handle())

    @property
    def params(self):
        return list(self._params)

    def close(self):
        """Destroy the engine (collective).  Idempotent."""
        if self._e is not None:
            self._lib.zero_engine_destroy(self._e)
            self._e = None
            with _live_lock:
                _live.discard(self)
            if self._own_hostcomm:  # libzero is done with it: freed here, not by a collection elsewhere
                self._hostcomm._unlink()
                self._hostcomm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -------------------------------------------------------------- params
    def register(self, name, data, numel=None, dtype="f32", group=0, host_owned=False, grad=None,
                 device="cpu", layers=None, shape=None):
        """Register a parameter.  `data`: a buffer (array.array, bytearray,
        numpy array, torch tensor) or an int address (then give numel).
        host_owned=True: `data` IS the parameter; libzero writes the updated
        values into it at every step (stage 0/1/2/offload).  Otherwise it is
        read at params_done.  layers=L: a stacked tensor of L equal slices
        (zero_register_stacked); report its slices with on_slice_ready.
        shape (ABI 1.7): the tensor's sizes, recorded in checkpoints (their
        product must be numel); ignored by an older libzero.  Returns a
        Param."""
        dt = _dtype(dtype)
        if host_owned and L.lib().zero_abi_version() < 10001:
            # a 1.0 library would read the descriptor only up to its own size and ignore the flag
            L.require("zero_set_hparams", "host_owned=True")
            raise OSError("host_owned=True needs libzero ABI 1.1")
        if layers is not None:
            L.require("zero_register_stacked", "layers=")
        addr, keep = _address(data, host_owned)
        if numel is None:
            if hasattr(data, "numel"):
                numel = data.numel()
            elif isinstance(data, int):
                raise ValueError("numel is required with an address")
            else:
                numel = memoryview(data).nbytes // _ITEMSIZE[dt]
        gaddr, gkeep = _address(grad, True)
        d = L.ParamDesc()
        d.struct_size = ctypes.sizeof(d)
        d.name = name.encode()
        d.data = addr
        d.numel = int(numel)
        d.dtype = dt
        d.device = L.DEVICE_CUDA if device == "cuda" else L.DEVICE_CPU
        d.grad = gaddr
        d.group = int(group)
        d.flags = L.PARAM_HOST_OWNED if host_owned else 0
        dims = None
        if shape is not None and L.lib().zero_abi_version() >= 10007:  # an older libzero would refuse the field
            dims = (ctypes.c_uint64 * max(1, len(shape)))(*[int(x) for x in shape])
            d.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_uint64))
            d.ndim = len(shape)
        h = ctypes.c_void_p()
        if layers is None:
            self._check(self._lib.zero_register_param(self._handle(), ctypes.byref(d), ctypes.byref(h)),
                        "zero_register_param(%s)" % name)
        else:
            self._check(self._lib.zero_register_stacked(self._handle(), ctypes.byref(d), int(layers),
                                                        ctypes.byref(h)), "zero_register_stacked(%s)" % name)
        p = Param(self, h, name, int(numel), dt, int(group), bool(host_owned), (keep, gkeep), len(self._params))
        p.layers = int(layers) if layers else 1
        self._params.append(p)
        return p

    def params_done(self):
        self._check(self._lib.zero_params_done(self._handle()), "zero_params_done")
        self._frozen = True
        for p in self._params:  # initial values were read; host-owned buffers stay referenced
            if not p.host_owned:
                p._keep = (None, p._keep[1])

    def set_group(self, group, lr_scale=1.0, weight_decay=None, expert_color=None):
        """Options of param group `group`, before params_done (zero_set_group).
        expert_color (1.10): None for a dense group, or an int >= 0 that makes
        it an expert group partitioned over the ranks giving it the same color
        (its expert-data-parallel group; docs/moe.md)."""
        color = L.GROUP_DENSE if expert_color is None else int(expert_color)
        if expert_color is not None and color < 0:
            raise ValueError("set_group: expert_color must be >= 0 (None for a dense group), got %r" % expert_color)
        g = L.GroupDesc(ctypes.sizeof(L.GroupDesc), int(group), float(lr_scale),
                        -1.0 if weight_decay is None else float(weight_decay), color, 0)
        self._check(self._lib.zero_set_group(self._handle(), ctypes.byref(g)), "zero_set_group")

    def set_hparams(self, group=None, lr=None, weight_decay=None, betas=None, eps=None):
        """Hyper-parameters for the next steps (zero_set_hparams): None keeps a
        value, "default" returns it to the config / scheduler."""
        def v(x):
            if x is None:
                return L.HPARAM_KEEP
            if x == "default":
                return L.HPARAM_DEFAULT
            return float(x)
        b1, b2 = (None, None) if betas is None else (("default", "default") if betas == "default" else betas)
        L.require("zero_set_hparams", "set_hparams")
        h = L.HParams(ctypes.sizeof(L.HParams), L.ALL_GROUPS if group is None else int(group), v(lr),
                      v(weight_decay), v(b1), v(b2), v(eps))
        self._check(self._lib.zero_set_hparams(self._handle(), ctypes.byref(h)), "zero_set_hparams")

    # -------------------------------------------------------------- per micro-batch
    def storage_address(self, p):
        """Address of libzero's persistent full copy of p (zero_param_storage,
        stages 0/1/2/offload): valid until close(), rewritten by step() and
        load(); read-only for the host."""
        L.require("zero_param_storage", "storage")
        buf = ctypes.c_void_p()
        self._check(self._lib.zero_param_storage(self._handle(), p.handle, ctypes.byref(buf)),
                    "zero_param_storage(%s)" % p.name)
        return buf.value

    def storage(self, p):
        """Zero-copy view of libzero's persistent copy of p (see storage_address)."""
        return view(self.storage_address(p), p.numel, p.dtype)

    def grad_buffer_address(self, p):
        buf = ctypes.c_void_p()
        self._check(self._lib.zero_grad_buffer(self._handle(), p.handle, ctypes.byref(buf)),
                    "zero_grad_buffer(%s)" % p.name)
        return buf.value

    def grad_buffer(self, p):
        """Where to ADD p's gradient: a zero-copy memoryview (f32: 'f';
        f16 and bf16: their raw 16-bit patterns, 'H'), valid until
        on_grad_ready(p).  numpy: numpy.asarray(view) (f16: .view(numpy.float16))."""
        return view(self.grad_buffer_address(p), p.numel, p.dtype)

    def slice_grad_buffer(self, p, layer):
        """Zero-copy view of slice `layer` of a stacked param's gradient buffer."""
        buf = ctypes.c_void_p()
        self._check(self._lib.zero_slice_grad_buffer(self._handle(), p.handle, int(layer), ctypes.byref(buf)),
                    "zero_slice_grad_buffer(%s, %d)" % (p.name, layer))
        return view(buf.value, p.numel // p.layers, p.dtype)

    def on_slice_ready(self, p, layer, stream=None):
        self._check(self._lib.zero_on_slice_ready(self._handle(), p.handle, int(layer), stream),
                    "zero_on_slice_ready(%s, %d)" % (p.name, layer))

    def on_grad_ready(self, p, stream=None):
        self._check(self._lib.zero_on_grad_ready(self._handle(), p.handle, stream), "zero_on_grad_ready(%s)" % p.name)

    def step(self, stream=None):
        a = L.StepArgs(ctypes.sizeof(L.StepArgs), 0, stream)
        r = L.StepResultC()
        r.struct_size = ctypes.sizeof(r)
        self._check(self._lib.zero_step(self._handle(), ctypes.byref(a), ctypes.byref(r)), "zero_step")
        return StepResult(r)

    def _array(self, params):
        arr = (ctypes.c_void_p * max(1, len(params)))(*[p.handle.value for p in params])
        return arr

    def gather_addresses(self, params):
        params = list(params)
        ptrs = (ctypes.c_void_p * max(1, len(params)))()
        self._check(self._lib.zero_gather(self._handle(), self._array(params), len(params), ptrs), "zero_gather")
        return [ptrs[i] for i in range(len(params))]

    def release(self, params):
        params = list(params)
        self._check(self._lib.zero_release(self._handle(), self._array(params), len(params)), "zero_release")

    @contextlib.contextmanager
    def gather(self, params):
        """with engine.gather([p, q]) as (vp, vq): read-only views of the full
        tensors (stage 3 all-gathers), released on exit."""
        params = list(params)
        addrs = self.gather_addresses(params)
        try:
            yield [view(a, p.numel, p.dtype) for a, p in zip(addrs, params)]
        finally:
            self.release(params)

    def _slices(self, slices):
        slices = [(p, int(layer)) for p, layer in slices]
        params = self._array([p for p, _ in slices])
        layers = (ctypes.c_uint32 * max(1, len(slices)))(*[layer for _, layer in slices])
        return slices, params, layers

    def gather_slice_addresses(self, slices):
        """Addresses of the given (param, layer) slices of stacked params
        (zero_gather_slices, ABI 1.6); release them with release_slices."""
        L.require("zero_gather_slices", "gather_slices")
        slices, params, layers = self._slices(slices)
        ptrs = (ctypes.c_void_p * max(1, len(slices)))()
        self._check(self._lib.zero_gather_slices(self._handle(), params, layers, len(slices), ptrs),
                    "zero_gather_slices")
        return [ptrs[i] for i in range(len(slices))]

    def release_slices(self, slices):
        L.require("zero_release_slices", "release_slices")
        slices, params, layers = self._slices(slices)
        self._check(self._lib.zero_release_slices(self._handle(), params, layers, len(slices)),
                    "zero_release_slices")

    @contextlib.contextmanager
    def gather_slices(self, slices):
        """with engine.gather_slices([(stack, 0), (stack, 1)]) as (v0, v1):
        read-only views of single layers of stacked params (numel / layers
        elements each).  In stage 3 only that layer's slice is all-gathered,
        not the whole stack; below stage 3 the views point into the full
        tensor, so the same code runs on every stage.  Released on exit."""
        slices = list(slices)
        addrs = self.gather_slice_addresses(slices)
        try:
            yield [view(a, p.numel // p.layers, p.dtype) for a, (p, _) in zip(addrs, slices)]
        finally:
            self.release_slices(slices)

    def params_write(self, params, values=None, root=0):
        """(ABI 1.10) zero_params_write: set params' values between
        accumulation windows -- DeepSpeed's GatheredParameters(modifier_rank=
        root).  values[i]: params[i]'s numel elements in its dtype (a buffer,
        a torch tensor or an int address), read on the rank at place `root`
        of each param's data-parallel group only: the other ranks may pass
        None entries, or values=None.  Afterwards every copy libzero keeps
        (and every host-owned buffer) holds the root's values on every rank;
        optimizer states stay.  Collective: every rank calls it with the
        params its group holds, in the same order, and the same root."""
        L.require("zero_params_write", "params_write")
        params = list(params)
        values = [None] * len(params) if values is None else list(values)
        if len(values) != len(params):
            raise ValueError("params_write: %d params but %d values (one per param, None where this rank "
                             "is not the root)" % (len(params), len(values)))
        addrs, keep = [], []
        for v in values:
            addr, k = _address(v, False)
            addrs.append(addr)
            keep.append(k)  # a read-only buffer's copy lives until the call returns
        vals = (ctypes.c_void_p * max(1, len(params)))(*addrs)
        self._check(self._lib.zero_params_write(self._handle(), self._array(params), vals, len(params), int(root)),
                    "zero_params_write")

    def set_phase(self, phase):
        L.require("zero_set_phase", "set_phase")
        self._check(self._lib.zero_set_phase(self._handle(), phase.encode()), "zero_set_phase")

    # -------------------------------------------------------------- checkpoints, stats
    def save(self, directory, tag=None, keep_last=0, client_state=None):
        """zero_save, or zero_save_ex with a tag, keep_last, or client_state
        (bytes-like, ABI 1.7: saved with the checkpoint, global rank 0's
        copy; client_state() returns it after load()).  Collective."""
        path = os.fspath(directory).encode()
        if tag is None and not keep_last and client_state is None:
            self._check(self._lib.zero_save(self._handle(), path), "zero_save")
            return
        L.require("zero_save_ex", "save(tag=, keep_last=)")
        o = L.SaveOptions()
        o.struct_size = ctypes.sizeof(o)
        o.keep_last = int(keep_last)
        o.tag = None if tag is None else str(tag).encode()
        buf = None
        if client_state is not None:
            L.require("zero_client_state", "save(client_state=)")
            data = bytes(client_state)
            buf = ctypes.create_string_buffer(data, len(data)) if data else None
            o.client_state = ctypes.cast(buf, ctypes.c_void_p) if buf is not None else None
            o.client_state_bytes = len(data)
        self._check(self._lib.zero_save_ex(self._handle(), path, ctypes.byref(o)), "zero_save_ex")

    def load(self, directory, weights_only=False):
        """zero_load; weights_only=True (ABI 1.8, zero_load_ex): the
        checkpoint's parameters only, from any world size, plugin or
        micro-step, and the optimizer starts over (states zero, steps 0,
        schedule and loss scaler as configured): fine-tuning from a trained
        checkpoint.  Collective."""
        path = os.fspath(directory).encode()
        if not weights_only:
            self._check(self._lib.zero_load(self._handle(), path), "zero_load")
            return
        L.require("zero_load_ex", "load(weights_only=True)")
        o = L.LoadOptions()
        o.struct_size = ctypes.sizeof(o)
        o.weights_only = 1
        self._check(self._lib.zero_load_ex(self._handle(), path, ctypes.byref(o)), "zero_load_ex")

    def client_state(self):
        """The client state of the checkpoint the last load() read (bytes),
        or None: no load yet, a checkpoint saved without one, or a libzero
        older than ABI 1.7 (which saves none)."""
        if "zero_client_state" in self._lib.zero_missing:
            return None
        data, n = ctypes.c_void_p(), ctypes.c_uint64()
        self._check(self._lib.zero_client_state(self._handle(), ctypes.byref(data), ctypes.byref(n)),
                    "zero_client_state")
        return ctypes.string_at(data.value, n.value) if n.value else None

    def memory_stats(self):
        """{"current": {tier: {tag: bytes}}, "peak": ..., "current_total": {tier: bytes}, "peak_total": ...}"""
        m = L.MemoryStatsC()
        m.struct_size = ctypes.sizeof(m)
        self._check(self._lib.zero_memory_stats_get(self._handle(), ctypes.byref(m)), "zero_memory_stats_get")
        out = {}
        for key in ("current", "peak"):
            arr = getattr(m, key)
            out[key] = {t: {g: int(arr[i][j]) for j, g in enumerate(L.MEM_TAGS)} for i, t in enumerate(L.TIERS)}
        for key in ("current_total", "peak_total"):
            arr = getattr(m, key)
            out[key] = {t: int(arr[i]) for i, t in enumerate(L.TIERS)}
        return out

    def broadcast(self, address, nbytes, root=0):
        """(ABI 1.7) zero_broadcast: nbytes of host memory at `address` from
        data-parallel rank `root` to every rank of the group.  Collective."""
        L.require("zero_broadcast", "broadcast")
        self._check(self._lib.zero_broadcast(self._handle(), address, int(nbytes), int(root)), "zero_broadcast")

    def info(self):
        """(ABI 1.7) zero_engine_info_get: {"stage", "global_step" (steps
        taken), "skipped_steps", "micro_step" (in the window in progress),
        "gradient_accumulation_steps", "train_micro_batch_size_per_gpu",
        "train_batch_size", "lr" (the schedule's, next step), "loss_scale"},
        valid between steps and right after load()."""
        L.require("zero_engine_info_get", "info")
        i = L.EngineInfoC()
        i.struct_size = ctypes.sizeof(i)
        self._check(self._lib.zero_engine_info_get(self._handle(), ctypes.byref(i)), "zero_engine_info_get")
        return {name: getattr(i, name) for name, _ in L.EngineInfoC._fields_[1:]}

    def step_timing(self, total=False):
        """(ABI 1.3) Where the time of the last zero_step went (total=True: sums
        over all steps): {"micro_steps", "step_seconds", "exposed_comm_seconds",
        "reduce_seconds", "norm_seconds", "optimizer_seconds", "gather_seconds",
        "copy_seconds", "hook_seconds", "fetch_seconds"} (abi/zero.h,
        zero_step_timing_get).  hook_seconds is the time inside libzero's
        hook calls only, not the Python around them."""
        L.require("zero_step_timing_get", "step_timing")
        t = L.StepTimingC()
        t.struct_size = ctypes.sizeof(t)
        self._check(self._lib.zero_step_timing_get(self._handle(), 1 if total else 0, ctypes.byref(t)),
                    "zero_step_timing_get")
        return {name: getattr(t, name) for name, _ in L.StepTimingC._fields_[2:]}

    def comm_stats(self):
        c = L.CommStatsC()
        c.struct_size = ctypes.sizeof(c)
        self._check(self._lib.zero_comm_stats_get(self._handle(), ctypes.byref(c)), "zero_comm_stats_get")
        return {name: getattr(c, name) for name, _ in L.CommStatsC._fields_[2:]}
