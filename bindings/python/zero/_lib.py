"""ctypes declarations of abi/zero.h (ABI 1.1) and the library loader.

libzero.so.1 is found through, in order:
  1. $ZERO_LIBRARY (a path to the .so): only that;
  2. the copy bundled in the package by `pip install ./bindings/python`
     (zero/_native/lib/libzero.so.1, its plugins in zero/_native/lib/zero/plugins):
     only that, unless ZERO_USE_SYSTEM_LIBRARY=1 asks for an installed libzero;
  3. the dynamic loader's usual search (LD_LIBRARY_PATH, the ld.so cache,
     standard directories) for "libzero.so.1",
  4. pkg-config: ``pkg-config --variable=libdir zero`` + "/libzero.so.1",
  5. the library next to a package installed by `make install`.
"""
import ctypes
import os
import shutil
import subprocess

# ---------------------------------------------------------------- statuses
STATUS_NAMES = {
    0: "ZERO_OK",
    1: "ZERO_ERR_INVALID_ARGUMENT",
    2: "ZERO_ERR_CONFIG",
    3: "ZERO_ERR_PLUGIN_NOT_FOUND",
    4: "ZERO_ERR_PLUGIN_ABI",
    5: "ZERO_ERR_PLUGIN_SYMBOL",
    6: "ZERO_ERR_PLUGIN_INIT",
    7: "ZERO_ERR_OUT_OF_MEMORY",
    8: "ZERO_ERR_COMM",
    9: "ZERO_ERR_MISMATCH",
    10: "ZERO_ERR_STATE",
    11: "ZERO_ERR_UNSUPPORTED",
    12: "ZERO_ERR_IO",
    13: "ZERO_ERR_TIMEOUT",
    14: "ZERO_ERR_LOSS_SCALE",
    15: "ZERO_ERR_DEVICE",
    16: "ZERO_ERR_INTERNAL",
    17: "ZERO_ERR_DUPLICATE",
}

DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 0, 1, 2
DEVICE_CPU, DEVICE_CUDA = 0, 1
COMM_AUTO, COMM_MPI, COMM_NCCL, COMM_SELF, COMM_HOST = 0, 1, 2, 3, 4
PARAM_HOST_OWNED = 0x1
ALL_GROUPS = -1
HPARAM_KEEP = -1.0
HPARAM_DEFAULT = -2.0
DEVICE_INDEX_AUTO = -1
MEM_TAGS = ("params", "grads", "master", "optim", "buckets", "gather", "other")
TIERS = ("device", "host")

c_u32, c_i32, c_u64, c_dbl, c_vp, c_cp = (ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_double,
                                          ctypes.c_void_p, ctypes.c_char_p)

LOG_FN = ctypes.CFUNCTYPE(None, c_vp, c_i32, ctypes.c_int, c_cp)


class EngineOptions(ctypes.Structure):
    _fields_ = [("struct_size", c_u32), ("reserved0", c_u32), ("config_json", c_cp), ("config_path", c_cp),
                ("comm_kind", c_i32), ("device_kind", c_i32), ("comm", c_vp), ("device_index", c_i32),
                ("reserved1", c_i32), ("stream", c_vp), ("plugin", c_cp), ("log_fn", LOG_FN), ("log_user", c_vp)]


class ParamDesc(ctypes.Structure):  # (1.7) shape, ndim appended
    _fields_ = [("struct_size", c_u32), ("reserved0", c_u32), ("name", c_cp), ("data", c_vp), ("numel", c_u64),
                ("dtype", c_i32), ("device", c_i32), ("grad", c_vp), ("group", c_i32), ("reserved1", c_i32),
                ("flags", c_u32), ("reserved2", c_u32), ("shape", ctypes.POINTER(c_u64)), ("ndim", c_u32),
                ("reserved3", c_u32)]


MAX_NDIM = 8


class GroupDesc(ctypes.Structure):
    # expert_color (1.3): GROUP_DENSE or >= 0 (a mixture-of-experts group)
    _fields_ = [("struct_size", c_u32), ("group", c_i32), ("lr_scale", c_dbl), ("weight_decay", c_dbl),
                ("expert_color", c_i32), ("reserved0", c_i32)]


GROUP_DENSE = -1


class HParams(ctypes.Structure):
    _fields_ = [("struct_size", c_u32), ("group", c_i32), ("lr", c_dbl), ("weight_decay", c_dbl),
                ("beta1", c_dbl), ("beta2", c_dbl), ("eps", c_dbl)]


class StepArgs(ctypes.Structure):
    _fields_ = [("struct_size", c_u32), ("reserved0", c_u32), ("stream", c_vp)]


class StepResultC(ctypes.Structure):
    _fields_ = [("struct_size", c_u32), ("boundary", c_i32), ("taken", c_i32), ("overflow", c_i32),
                ("global_step", c_u64), ("grad_norm", c_dbl), ("loss_scale", c_dbl), ("lr", c_dbl)]


class MemoryStatsC(ctypes.Structure):
    _fields_ = [("struct_size", c_u32), ("reserved0", c_u32), ("current", (c_u64 * 7) * 2),
                ("peak", (c_u64 * 7) * 2), ("current_total", c_u64 * 2), ("peak_total", c_u64 * 2)]


class CommStatsC(ctypes.Structure):
    _fields_ = [("struct_size", c_u32), ("reserved0", c_u32), ("allreduce_calls", c_u64),
                ("reduce_scatter_calls", c_u64), ("allgather_calls", c_u64), ("broadcast_calls", c_u64),
                ("other_calls", c_u64), ("bytes_reduced", c_u64), ("bytes_gathered", c_u64),
                ("reduction_passes", c_u64), ("exposed_comm_seconds", c_dbl), ("total_comm_seconds", c_dbl)]


class StepTimingC(ctypes.Structure):  # (1.3) zero_step_timing
    _fields_ = [("struct_size", c_u32), ("reserved0", c_u32), ("micro_steps", c_u64), ("step_seconds", c_dbl),
                ("exposed_comm_seconds", c_dbl), ("reduce_seconds", c_dbl), ("norm_seconds", c_dbl),
                ("optimizer_seconds", c_dbl), ("gather_seconds", c_dbl), ("copy_seconds", c_dbl),
                ("hook_seconds", c_dbl), ("fetch_seconds", c_dbl)]


class EngineInfoC(ctypes.Structure):  # (1.7) zero_engine_info
    _fields_ = [("struct_size", c_u32), ("stage", c_i32), ("global_step", c_u64), ("skipped_steps", c_u64),
                ("micro_step", c_u32), ("gradient_accumulation_steps", c_u32),
                ("train_micro_batch_size_per_gpu", c_u64), ("train_batch_size", c_u64), ("lr", c_dbl),
                ("loss_scale", c_dbl)]


class SaveOptions(ctypes.Structure):  # (1.2) tag, keep_last; (1.7) client state
    _fields_ = [("struct_size", c_u32), ("keep_last", c_u32), ("tag", c_cp), ("client_state", c_vp),
                ("client_state_bytes", c_u64)]


class LoadOptions(ctypes.Structure):  # (1.8) weights_only
    _fields_ = [("struct_size", c_u32), ("weights_only", c_u32)]


def _declare(lib):
    P = ctypes.POINTER
    sigs = {
        "zero_status_string": (c_cp, [c_i32]),
        "zero_abi_version": (c_u32, []),
        "zero_version_string": (c_cp, []),
        "zero_engine_create": (c_i32, [P(EngineOptions), P(c_vp), ctypes.c_char_p, ctypes.c_size_t]),
        "zero_engine_destroy": (None, [c_vp]),
        "zero_last_error": (c_cp, [c_vp]),
        "zero_rank": (ctypes.c_int, [c_vp]),
        "zero_world_size": (ctypes.c_int, [c_vp]),
        "zero_plugin_name": (c_cp, [c_vp]),
        "zero_register_param": (c_i32, [c_vp, P(ParamDesc), P(c_vp)]),
        "zero_params_done": (c_i32, [c_vp]),
        "zero_register_stacked": (c_i32, [c_vp, P(ParamDesc), c_u32, P(c_vp)]),
        "zero_slice_grad_buffer": (c_i32, [c_vp, c_vp, c_u32, P(c_vp)]),
        "zero_on_slice_ready": (c_i32, [c_vp, c_vp, c_u32, c_vp]),
        "zero_set_group": (c_i32, [c_vp, P(GroupDesc)]),
        "zero_set_hparams": (c_i32, [c_vp, P(HParams)]),
        "zero_gather": (c_i32, [c_vp, P(c_vp), ctypes.c_size_t, P(c_vp)]),
        "zero_release": (c_i32, [c_vp, P(c_vp), ctypes.c_size_t]),
        "zero_gather_slices": (c_i32, [c_vp, P(c_vp), P(c_u32), ctypes.c_size_t, P(c_vp)]),
        "zero_release_slices": (c_i32, [c_vp, P(c_vp), P(c_u32), ctypes.c_size_t]),
        "zero_set_phase": (c_i32, [c_vp, c_cp]),
        "zero_grad_buffer": (c_i32, [c_vp, c_vp, P(c_vp)]),
        "zero_param_storage": (c_i32, [c_vp, c_vp, P(c_vp)]),
        "zero_on_grad_ready": (c_i32, [c_vp, c_vp, c_vp]),
        "zero_step": (c_i32, [c_vp, P(StepArgs), P(StepResultC)]),
        "zero_loss_scale": (c_dbl, [c_vp]),
        "zero_save": (c_i32, [c_vp, c_cp]),
        "zero_load": (c_i32, [c_vp, c_cp]),
        "zero_save_ex": (c_i32, [c_vp, c_cp, P(SaveOptions)]),
        "zero_client_state": (c_i32, [c_vp, P(c_vp), P(c_u64)]),
        "zero_load_ex": (c_i32, [c_vp, c_cp, P(LoadOptions)]),
        "zero_engine_info_get": (c_i32, [c_vp, P(EngineInfoC)]),
        "zero_broadcast": (c_i32, [c_vp, c_vp, c_u64, ctypes.c_int]),
        "zero_memory_stats_get": (c_i32, [c_vp, P(MemoryStatsC)]),
        "zero_comm_stats_get": (c_i32, [c_vp, P(CommStatsC)]),
        "zero_step_timing_get": (c_i32, [c_vp, c_i32, P(StepTimingC)]),
        "zero_params_write": (c_i32, [c_vp, P(c_vp), P(c_vp), ctypes.c_size_t, ctypes.c_int]),
    }
    missing = []
    for name, (res, args) in sigs.items():
        try:
            f = getattr(lib, name)
        except AttributeError:  # an older libzero (1.0 lacks the 1.1 calls)
            missing.append(name)
            continue
        f.restype = res
        f.argtypes = args
    lib.zero_missing = frozenset(missing)
    return lib


def require(name, what):
    """Raise OSError if the loaded libzero lacks `name` (a call added after ABI 1.0)."""
    if name in lib().zero_missing:
        v = lib().zero_abi_version()
        need = {"zero_step_timing_get": "1.3", "zero_gather_slices": "1.6", "zero_release_slices": "1.6",
                "zero_save_ex": "1.2", "zero_client_state": "1.7", "zero_engine_info_get": "1.7",
                "zero_broadcast": "1.7", "zero_load_ex": "1.8",
                "zero_params_write": "1.10"}.get(name, "1.1")
        raise OSError("%s needs libzero ABI %s (%s); the loaded library is %d.%d"
                      % (what, need, name, v // 10000, v % 10000))


NATIVE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


def bundled_library():
    """Path of the libzero.so.1 bundled in the package (pip install), or None."""
    path = os.path.join(NATIVE_DIR, "lib", "libzero.so.1")
    return path if os.path.isfile(path) else None


def _use_system():
    return os.environ.get("ZERO_USE_SYSTEM_LIBRARY", "").strip().lower() in ("1", "on", "yes", "true")


def _candidates():
    env = os.environ.get("ZERO_LIBRARY")
    if env:
        yield env, "ZERO_LIBRARY"
        return
    bundled = bundled_library()
    if bundled and not _use_system():
        # the bundled copy or nothing: never a system libzero of another version behind the user's back
        yield bundled, "bundled with the package; ZERO_USE_SYSTEM_LIBRARY=1 uses an installed libzero instead"
        return
    yield "libzero.so.1", "the dynamic loader's search"
    pc = shutil.which("pkg-config")
    if pc:
        try:
            libdir = subprocess.run([pc, "--variable=libdir", "zero"], capture_output=True, text=True,
                                    timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            libdir = ""
        if libdir:
            yield os.path.join(libdir, "libzero.so.1"), "pkg-config"
    # installed by `make install` into <libdir>/python3.X/site-packages/zero
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.normpath(os.path.join(here, "..", "..", "..", "libzero.so.1")), "next to the installed package"


def loaded_path():
    """Path of the libzero.so.1 this process loaded (from /proc/self/maps), or None."""
    lib()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libzero.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return None


_lib = None


def lib():
    """The loaded libzero (ctypes.CDLL), loaded on first use."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path, how in _candidates():
        try:
            _lib = _declare(ctypes.CDLL(path))
            return _lib
        except OSError as ex:
            tried.append("%s (%s): %s" % (path, how, ex))
    raise OSError("libzero.so.1 not found; tried: " + "; ".join(tried) +
                  ". `pip install ./bindings/python` bundles it; else set ZERO_LIBRARY to the library's path, add "
                  "its directory to LD_LIBRARY_PATH, or install libzero so that pkg-config finds zero.pc")


# ---------------------------------------------------------------- MPI
# libzero finalises MPI when the last engine it initialised MPI for is
# destroyed, after which MPI cannot start again in this process.  A Python
# program creates engines one after another (tests, notebooks), so under an
# MPI launcher the package initialises MPI itself (through the libmpi that
# libzero links) and finalises it at exit: libzero then never finalises it.
_mpi = None


def under_mpi_launcher():
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"))


def ensure_mpi(close_engines):
    """Initialise MPI (MPI_THREAD_MULTIPLE) if it is not yet; returns True when
    MPI is usable.  `close_engines` runs at exit before MPI_Finalize."""
    global _mpi
    if _mpi is not None:
        return True
    import atexit
    import ctypes.util
    name = ctypes.util.find_library("mpi") or "libmpi.so.40"
    try:
        m = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    flag = ctypes.c_int(0)
    m.MPI_Initialized(ctypes.byref(flag))
    if flag.value:
        _mpi = m  # the host (mpi4py, torch) owns MPI
        return True
    provided = ctypes.c_int(0)
    MPI_THREAD_MULTIPLE = 3  # Open MPI and MPICH
    if m.MPI_Init_thread(None, None, MPI_THREAD_MULTIPLE, ctypes.byref(provided)) != 0:
        return False
    _mpi = m

    def _finalize():
        close_engines()
        fin = ctypes.c_int(0)
        m.MPI_Finalized(ctypes.byref(fin))
        if not fin.value:
            m.MPI_Finalize()

    atexit.register(_finalize)
    return True


def _mpi_world(m):
    try:  # Open MPI: MPI_Comm is a pointer, MPI_COMM_WORLD = &ompi_mpi_comm_world
        return ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(m, "ompi_mpi_comm_world"))), ctypes.c_void_p
    except ValueError:  # MPICH and derivatives: MPI_Comm is an int
        return ctypes.c_int(0x44000000), ctypes.c_int


def mpi_rank_size():
    """(rank, size) in MPI_COMM_WORLD (after ensure_mpi)."""
    world, _ = _mpi_world(_mpi)
    r, n = ctypes.c_int(0), ctypes.c_int(1)
    _mpi.MPI_Comm_rank(world, ctypes.byref(r))
    _mpi.MPI_Comm_size(world, ctypes.byref(n))
    return r.value, n.value


def mpi_split(ranks, my_rank):
    """A sub-communicator of MPI_COMM_WORLD holding world ranks `ranks` in that
    order (MPI_Comm_split, collective over the WORLD: every rank calls it,
    each with its own group).  Returns a ctypes object holding the MPI_Comm;
    pass ctypes.addressof(it) as zero_engine_options.comm (ZERO_COMM_MPI) and
    mpi_free() it after zero_engine_create (libzero duplicates it)."""
    m = _mpi
    ranks = [int(r) for r in ranks]
    color = min(ranks) if my_rank in ranks else -32766  # MPI_UNDEFINED (Open MPI and MPICH)
    key = ranks.index(my_rank) if my_rank in ranks else 0
    world, handle_type = _mpi_world(m)
    out = handle_type()
    rc = m.MPI_Comm_split(world, ctypes.c_int(color), ctypes.c_int(key), ctypes.byref(out))
    if rc != 0:
        raise OSError("MPI_Comm_split failed with MPI error %d" % rc)
    return out


def mpi_free(comm):
    _mpi.MPI_Comm_free(ctypes.byref(comm))

