"""Imported first by the torch tests: exits 77 (skipped), saying why, where torch or the
optcast_torch module (which registers backend "optcast") is missing."""
import sys

try:
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.multiprocessing  # noqa: F401
except ImportError as e:
    print(f"skipped: torch is not installed for {sys.executable} ({e}; Debian: python3-torch)")
    sys.exit(77)
try:
    import optcast_torch  # noqa: F401
except ImportError as e:
    print(f"skipped: optcast_torch was not built ({e}; needs libtorch-dev and pybind11-dev, meson -Dtorch)")
    sys.exit(77)
