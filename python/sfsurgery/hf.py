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
    left dense (ignore). Loading options, not saved: launches (a launch
    document or policy file) and prefill ("ours", "decode" or "cusparselt",
    SparseLinear), both None unless set in code; $SFSURGERY_LAUNCHES and
    $SFSURGERY_PREFILL set them for from_pretrained, whose config.json
    copy of this config wins over one passed to it."""

    def __init__(self, format: str = layout.FORMAT, targets=None, ignore=None, sparsity_structure: str = "2:4",
                 launches: Optional[str] = None, prefill: Optional[str] = None, **kwargs):
        self.quant_method = layout.QUANT_METHOD
        self.format = format
        self.targets = list(targets or [])
        self.ignore = list(ignore or [])
        self.sparsity_structure = sparsity_structure
        self.launches = launches
        self.prefill = prefill
        for k, v in kwargs.items():
            if k != "quant_method":
                setattr(self, k, v)

    def to_dict(self):
        """The config as config.json holds it: without the loading options."""
        d = super().to_dict()
        d.pop("launches", None)
        d.pop("prefill", None)
        return d


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
        """Replaces the targets' nn.Linears by SparseLinears (serve.replace)."""
        files = list(checkpoint_files or [])
        if not files:
            raise CheckpointError("sfsurgery: transformers passed no checkpoint files")
        tensors = {}
        for f in files:
            tensors.update(layout.read_header(f))
        self._path = os.path.dirname(os.path.abspath(files[0]))
        mods = layout.sparse_modules(tensors, self.quantization_config.targets)
        serve.replace(model, mods)
        return model

    def _process_model_after_weight_loading(self, model, **kwargs):
        """Stacks and attaches the launch records (serve.finish)."""
        q = self.quantization_config
        serve.finish(model, self._path, launches=q.launches, prefill=q.prefill)
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
