"""zero: Python bindings of libzero (ZeRO, the Zero Redundancy Optimizer, as a
C library), over its C ABI with ctypes.  Importable without torch; the
PyTorch adapter is ``zero.torch`` (``import zero.torch``).

    import zero
    e = zero.Engine({"train_micro_batch_size_per_gpu": 1, "optimizer": {...},
                     "zero_optimization": {"stage": 2}})
    p = e.register("w", buf, host_owned=True)
    e.params_done()
    g = e.grad_buffer(p); ...add the gradient into g...; e.on_grad_ready(p)
    r = e.step()
"""
from ._lib import ALL_GROUPS, PARAM_HOST_OWNED, STATUS_NAMES
from ._hostcomm import TorchHostComm
from .engine import Engine, Param, StepResult, ZeroError, abi_version, status_string, version, view

__all__ = ["Engine", "TorchHostComm", "Param", "StepResult", "ZeroError", "abi_version", "status_string", "version", "view",
           "ALL_GROUPS", "PARAM_HOST_OWNED", "STATUS_NAMES"]
try:  # written by setup.py (pip install) and make install: libzero's version
    from ._version import version as __version__
except ImportError:  # the source tree: the loaded library's version, on first use
    def __getattr__(name):
        if name == "__version__":
            return version()
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
