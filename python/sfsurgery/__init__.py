"""sfsurgery: serve 2:4 checkpoints written by `sfsurgery prune --format
ampere` with sfsurgery's own GPU kernels, in PyTorch and transformers.

    import sfsurgery
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("llama-2of4", device_map="cuda")

Importing the package registers its quantization method ("sfsurgery")
with transformers, when transformers is installed. `records` and `layout`
(launch records, checkpoint contents) need only the standard library; the
rest needs torch. docs/serve.md in the repository tells the whole story.
"""

from . import layout, records, text
from .errors import CheckpointError, DeviceError, InputError, RecordError, SfsurgeryError

__version__ = "0.1.0"

__all__ = ["CheckpointError", "DeviceError", "InputError", "RecordError", "SfsurgeryError", "layout", "records", "text"]

try:
    import torch as _torch
except ImportError:  # the CPU-only parts still work
    _torch = None

if _torch is not None:
    from .linear import SparseLinear, SparseMLP
    from .serve import load

    __all__ += ["SparseLinear", "SparseMLP", "load"]

    try:
        import transformers as _transformers
    except ImportError:
        _transformers = None
    if _transformers is not None:
        try:
            from . import hf as _hf
        except ImportError as _e:
            raise ImportError(
                f"sfsurgery needs transformers 5 or newer for from_pretrained "
                f"(transformers {_transformers.__version__} is installed): {_e}"
            ) from None
        _hf.register()
else:

    def __getattr__(name):
        if name in ("SparseLinear", "SparseMLP", "load", "ops", "serve", "hf"):
            raise ImportError(f"sfsurgery.{name} needs torch (pip install torch)")
        raise AttributeError(f"module 'sfsurgery' has no attribute {name!r}")
