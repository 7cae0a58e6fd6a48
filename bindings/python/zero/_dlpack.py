"""A DLPack capsule over memory libzero owns (host or CUDA device), so that a
framework wraps it as a tensor without copying: torch.utils.dlpack.from_dlpack
(torch 1.10 and later) takes the capsule on every torch version, needs no
numpy (unlike __cuda_array_interface__, which torch parses with numpy), and
keeps the device the pointer says.

The capsule holds a DLManagedTensor (DLPack 0.x ABI, the "dltensor" capsule
every framework accepts) built with ctypes.  Ownership: the memory stays
libzero's; the struct lives in this module's table until the consumer calls
its deleter (when its tensor is freed), so the tensor must not outlive the
libzero buffer it views (the callers use it for one gradient hand-off, one
gather, or until the engine is closed).  Thread-safe: the table is locked;
the deleter may run on any thread (ctypes takes the GIL)."""
import ctypes
import threading

KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_live = {}  # address of a _Managed -> (the struct, its shape array)
_lock = threading.Lock()


@_DELETER
def _delete(managed):
    with _lock:
        _live.pop(ctypes.addressof(managed.contents), None)


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def capsule(address, numel, code, bits, device_type=KDL_CPU, device_id=0):
    """A "dltensor" PyCapsule of a 1-D array of `numel` elements of DLPack
    type (code, bits) at `address` on (device_type, device_id)."""
    m = _Managed()
    shape = (ctypes.c_int64 * 1)(int(numel))
    t = m.dl_tensor
    t.data = int(address)
    t.device = _Device(device_type, device_id)
    t.ndim = 1
    t.dtype = _DataType(code, bits, 1)
    t.shape = shape
    t.strides = None  # compact row-major
    t.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _delete
    with _lock:
        _live[ctypes.addressof(m)] = (m, shape)
    return _new_capsule(ctypes.addressof(m), b"dltensor", None)


def live():
    """How many capsules' structs are still held (for tests: 0 once every
    consumer freed its tensor)."""
    with _lock:
        return len(_live)
