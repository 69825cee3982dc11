"""A checkpoint's decoder layers one at a time, in transformers' own
modules, with their weights streamed from the checkpoint's shards.

The model is built from its config on the meta device
(AutoModelForCausalLM.from_config, attention "sdpa"), so it holds no
weights. The token embeddings are loaded to embed the samples and freed;
the rotary embedding module is built anew on the calibration device (its
inv_freq buffer is computed, not loaded); then each decoder layer is
loaded when asked (its tensors read from the shards with safetensors on a
loader thread, the next layer's read while this one computes, cast to the
embeddings' dtype, moved to the device and assigned to the layer's
parameters) and returned to the meta device when released. A layer is
called as the model calls it: hidden states, position_embeddings from the
rotary module, and no attention mask, which is causal attention under
sdpa (transformers 5: the layer returns the hidden states).

Which tensors belong where comes from the checkpoint reader
(sfsurgery.layout.read_tensors: name, dtype, shape, shard path); every
tensor a module needs must be there with the shape the config gives it.
"""

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from ..errors import CheckpointError, InputError
from .plan import EMBEDDINGS, LAYERS, SUPPORTED_TYPES, Plan, check_seqlen
from .stream import TORCH_DTYPES, batches

ROTARY = "model.rotary_emb"

# (the module's state_dict key, the checkpoint tensor name, its shard path)
_Key = Tuple[str, str, str]


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


class Checkpoint:
    """plan's model for calibration on device with samples of seqlen
    tokens: embed, then layer / forward / release for each decoder layer in
    order (stream.Layers). A context manager: leaving it stops the loader
    thread and closes the shards."""

    def __init__(self, plan: Plan, device: torch.device, seqlen: int):
        try:
            from transformers import AutoConfig, AutoModelForCausalLM
        except ImportError as e:
            raise InputError(f"calibrate needs transformers: {e}") from None
        self.plan = plan
        self.device = device
        self.load_seconds = 0.0
        where = os.path.join(plan.directory, "config.json")
        try:
            config = AutoConfig.from_pretrained(plan.directory, local_files_only=True)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{where}: transformers cannot read it: {_first_line(e)}") from None
        if config.model_type not in SUPPORTED_TYPES:
            raise InputError(f"{where}: model_type {config.model_type!r}: calibrate supports {', '.join(SUPPORTED_TYPES)}")
        check_seqlen(seqlen, getattr(config, "max_position_embeddings", None), where)
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
        except (ValueError, ImportError, KeyError) as e:
            raise CheckpointError(f"{where}: transformers cannot build the model: {_first_line(e)}") from None
        model.eval()
        if getattr(model.config, "_attn_implementation", None) != "sdpa":
            raise CheckpointError(f"{where}: transformers chose attention {model.config._attn_implementation!r}, not sdpa")
        try:
            self.layers = model.get_submodule(LAYERS)
            self.embedding = model.get_submodule(EMBEDDINGS)
            rotary = model.get_submodule(ROTARY)
        except AttributeError as e:
            raise CheckpointError(f"{where}: transformers' {type(model).__name__} has no {_first_line(e)}") from None
        if len(self.layers) != plan.layers:
            raise CheckpointError(f"{where}: {len(self.layers)} decoder layers in transformers' model, {plan.layers} in config.json")
        embed = plan.tensors[EMBEDDINGS + ".weight"]
        if embed.dtype not in TORCH_DTYPES:
            raise CheckpointError(f"{embed.path}: {embed.name} is {embed.dtype}; calibrate runs BF16, F16 and F32 models")
        self.dtype = TORCH_DTYPES[embed.dtype]
        # Made with the device as the default one rather than by a device
        # argument, which transformers deprecates from 5.18: every tensor
        # the rotary embedding makes (inv_freq and any copy of it) is there.
        with torch.device(device):
            self.rotary = type(rotary)(config=model.config)
        self._model = model  # the skeleton the layers belong to
        self._embed_keys = self._keys(EMBEDDINGS + ".", self.embedding)
        self._layer_keys = [self._keys(f"{LAYERS}.{i}.", self.layers[i]) for i in range(len(self.layers))]
        self._stack = ExitStack()
        self._files: Dict[str, object] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="sfsurgery-loader")
        self._next: Dict[int, Future] = {}
        self._position: Optional[Tensor] = None
        self._rope: Optional[Tuple[Tensor, Tensor]] = None

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._stack.close()

    def _keys(self, prefix: str, module: nn.Module) -> List[_Key]:
        out = []
        for key, t in module.state_dict().items():
            name = prefix + key
            info = self.plan.tensors.get(name)
            if info is None:
                raise CheckpointError(f"{self.plan.model}: no tensor {name}, which transformers' {type(module).__name__} needs")
            if tuple(info.shape) != tuple(t.shape):
                raise CheckpointError(f"{info.path}: {name} is {list(info.shape)}; config.json makes it {list(t.shape)}")
            out.append((key, name, info.path))
        return out

    def _read(self, keys: List[_Key]) -> Dict[str, Tensor]:
        """Reads tensors on the host (the loader thread's job), cast to the
        model's dtype where floating."""
        from safetensors import safe_open

        out = {}
        for key, name, path in keys:
            f = self._files.get(path)
            if f is None:
                try:
                    f = self._stack.enter_context(safe_open(path, framework="pt", device="cpu"))
                except Exception as e:  # safetensors raises its own error types
                    raise CheckpointError(f"{path}: {_first_line(e)}") from None
                self._files[path] = f
            t = f.get_tensor(name)
            if t.is_floating_point() and t.dtype != self.dtype:
                t = t.to(self.dtype)
            out[key] = t
        return out

    def _load(self, module: nn.Module, state: Future, where: str) -> None:
        t0 = time.perf_counter()
        tensors = {k: v.to(self.device) for k, v in state.result().items()}
        module.load_state_dict(tensors, strict=True, assign=True)
        del tensors
        for p in module.parameters():
            p.requires_grad_(False)
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.is_meta:
                raise CheckpointError(f"{self.plan.model}: {where}.{name} is not in the checkpoint")
        self.load_seconds += time.perf_counter() - t0

    def embed(self, ids: Tensor, batch: int) -> Tensor:
        """The token embeddings of ids [samples, seqlen] on the device, in
        the model's dtype; also prepares the position embeddings for
        samples of that length."""
        future = self._pool.submit(self._read, self._embed_keys)
        if len(self.layers):
            self._next[0] = self._pool.submit(self._read, self._layer_keys[0])
        self._load(self.embedding, future, EMBEDDINGS)
        count, seqlen = ids.shape
        hidden = torch.empty((count, seqlen, self.embedding.weight.shape[1]), dtype=self.dtype, device=self.device)
        with torch.no_grad():
            for b in batches(count, batch):
                hidden[b] = self.embedding(ids[b].to(self.device))
        self.embedding.to_empty(device="meta")
        self._position = torch.arange(seqlen, device=self.device).unsqueeze(0)
        with torch.no_grad():
            self._rope = self.rotary(hidden[:1], self._position)
        return hidden

    def layer(self, i: int) -> nn.Module:
        """Decoder layer i with its weights on the device; starts reading
        layer i + 1."""
        future = self._next.pop(i, None) or self._pool.submit(self._read, self._layer_keys[i])
        if i + 1 < len(self.layers) and i + 1 not in self._next:
            self._next[i + 1] = self._pool.submit(self._read, self._layer_keys[i + 1])
        layer = self.layers[i]
        self._load(layer, future, f"{LAYERS}.{i}")
        return layer

    def release(self, i: int) -> None:
        """Returns decoder layer i to the meta device, freeing its weights."""
        self.layers[i].to_empty(device="meta")

    def forward(self, layer: nn.Module, x: Tensor) -> Tensor:
        """The layer's output for x [batch, seqlen, hidden], called as the
        model calls it, with causal attention over each sample."""
        out = layer(x, attention_mask=None, position_ids=self._position, position_embeddings=self._rope)
        return out[0] if isinstance(out, tuple) else out
