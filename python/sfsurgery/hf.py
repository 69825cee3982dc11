"""The quantization method "sfsurgery" for Hugging Face transformers.

After `import sfsurgery`, `AutoModelForCausalLM.from_pretrained(dir,
device_map="cuda")` on an `sfsurgery prune --format ampere` output builds
the model, replaces each pruned projection by a SparseLinear before the
weights load (the checkpoint's packed, meta, shape and bias tensors load
into its buffers by name, dtypes kept), and after loading stacks q, k, v
and gate, up per layer and attaches the launch records (serve.finish). The
quantizer is compileable, so generate() with a static cache compiles the
decode step with CUDA graphs as for a dense model.

Written against transformers 5.x (quantizers.HfQuantizer,
register_quantizer, register_quantization_config).
"""

import os
from typing import Optional

from . import layout, serve
from .errors import CheckpointError

from transformers.quantizers import HfQuantizer, register_quantization_config, register_quantizer
from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING
from transformers.utils.quantization_config import QuantizationConfigMixin


class SfsurgeryConfig(QuantizationConfigMixin):
    """config.json's quantization_config of an ampere output: quant_method
    "sfsurgery", format "ampere", the pruned modules (targets) and those
    left dense (ignore). It carries no loading options: the checkpoint's
    config.json comes from wherever the model came from, so where the
    launch records come from and which prefill path runs are the user's
    choice alone ($SFSURGERY_LAUNCHES and $SFSURGERY_PREFILL, or
    sfsurgery.load's arguments); "launches" or "prefill" keys in
    config.json are ignored (test_gpu_records.QuantizerConfigTest)."""

    # Keys a config.json may hold that must not steer loading.
    LOADING_OPTIONS = ("launches", "prefill")

    def __init__(self, format: str = layout.FORMAT, targets=None, ignore=None, sparsity_structure: str = "2:4", **kwargs):
        self.quant_method = layout.QUANT_METHOD
        self.format = format
        self.targets = list(targets or [])
        self.ignore = list(ignore or [])
        self.sparsity_structure = sparsity_structure
        for k, v in kwargs.items():
            if k != "quant_method" and k not in self.LOADING_OPTIONS:
                setattr(self, k, v)


class SfsurgeryQuantizer(HfQuantizer):
    """Loads an ampere output into SparseLinears (see the module doc)."""

    requires_calibration = True

    def __init__(self, quantization_config, **kwargs):
        super().__init__(quantization_config, **kwargs)
        self._path: Optional[str] = None

    def validate_environment(self, *args, **kwargs):
        """Refuses a machine without a usable GPU, another sfsurgery format,
        and a device_map that offloads."""
        serve.check_gpu()
        if self.quantization_config.format != layout.FORMAT:
            raise CheckpointError(f"quantization_config: sfsurgery format {self.quantization_config.format!r}, want {layout.FORMAT!r}")
        device_map = kwargs.get("device_map")
        if isinstance(device_map, dict) and any(str(d) in ("cpu", "disk") for d in device_map.values()):
            raise CheckpointError("sfsurgery's projections run on the GPU: a device_map with cpu or disk offload cannot serve them")

    def _process_model_before_weight_loading(self, model, checkpoint_files=None, **kwargs):
        """Replaces the targets' nn.Linears by SparseLinears (serve.replace),
        from the checkpoint's tensors as the Go reader reads them."""
        files = list(checkpoint_files or [])
        if not files:
            raise CheckpointError("sfsurgery: transformers passed no checkpoint files")
        self._path = os.path.dirname(os.path.abspath(files[0]))
        tensors = layout.read_tensors(self._path)
        have = {os.path.basename(t.path) for t in tensors.values()}
        extra = sorted({os.path.basename(f) for f in files} - have)
        if extra:
            raise CheckpointError(f"{self._path}: transformers loads {', '.join(extra)}, which the checkpoint's index does not name")
        mods = layout.sparse_modules(tensors, self.quantization_config.targets)
        serve.replace(model, mods)
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        """Stacks and attaches the launch records (serve.finish), from the
        source $SFSURGERY_LAUNCHES names (the planner's by default)."""
        serve.finish(model, self._path)
        return model

    def is_serializable(self, *args, **kwargs):
        """False: save the checkpoint sfsurgery wrote instead."""
        return False

    @property
    def is_trainable(self):
        """False: inference only (the op has no backward)."""
        return False

    @property
    def is_compileable(self) -> bool:
        """True: the ops are torch.library custom ops, so generate() compiles
        the decode step."""
        return True


def register() -> None:
    """Registers the config and quantizer under "sfsurgery", once."""
    if layout.QUANT_METHOD not in AUTO_QUANTIZATION_CONFIG_MAPPING:
        register_quantization_config(layout.QUANT_METHOD)(SfsurgeryConfig)
    if layout.QUANT_METHOD not in AUTO_QUANTIZER_MAPPING:
        register_quantizer(layout.QUANT_METHOD)(SfsurgeryQuantizer)
