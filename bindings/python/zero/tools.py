"""libzero's command-line tools bundled with the package (pip install).

    python -m zero.tools                    # lists them and where they are
    python -m zero.tools zero-info [ARGS]   # runs one (also: the zero-info,
                                            # zero-ckpt, zero-estimate scripts)

The tools find the bundled libzero.so.1 and plugins through their RUNPATH
($ORIGIN/../lib), whatever the environment.
"""
import os
import sys

from . import _lib as L


def bin_dir():
    """The bundled tools' directory (zero/_native/bin), or None when the
    package was built without libzero (ZERO_BUNDLE=0, make install, the source tree)."""
    d = os.path.join(L.NATIVE_DIR, "bin")
    return d if os.path.isdir(d) else None


def names():
    d = bin_dir()
    return sorted(n for n in os.listdir(d) if n.startswith("zero-")) if d else []


def run(name, args=()):
    """exec the bundled tool `name` with `args` (does not return)."""
    d = bin_dir()
    path = os.path.join(d, name) if d else None
    if not path or not os.path.isfile(path):
        sys.exit("zero.tools: no bundled %s (bundled: %s); the package was built without libzero, use the "
                 "installed tool instead" % (name, ", ".join(names()) or "none"))
    sys.stdout.flush()
    os.execv(path, [path] + list(args))


def zero_info():
    run("zero-info", sys.argv[1:])


def zero_ckpt():
    run("zero-ckpt", sys.argv[1:])


def zero_estimate():
    run("zero-estimate", sys.argv[1:])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m zero.tools TOOL [ARGS...]\nbundled in %s: %s"
              % (bin_dir() or "(none)", " ".join(names()) or "none"))
        return 0
    run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
