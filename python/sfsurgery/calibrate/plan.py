"""What a calibration will do, checked before anything heavy runs: the
model directory and its config, a tokenizer, the target projections (as
`sfsurgery prune --dry-run --json` selects them: the Go side decides the
targets, never this package), the checkpoint's tensors and the output
path. Standard library only: the package's CPU tests run it in CI.
"""

import json
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .. import layout, tool
from ..errors import CheckpointError, InputError
from ..perplexity import TOKENIZER_FILES

SUPPORTED_TYPES = ("llama", "mistral", "qwen2")
METHODS = ("wanda", "ria", "sparsegpt")
# Each method's parameters, as the decisions file records them
# (sfsurgery.calibrate.methods uses these values).
METHOD_PARAMS = {"wanda": {}, "ria": {"alpha": 0.5}, "sparsegpt": {"dampening": 0.01, "block": 128}}
SCOPES = ("all", "attn", "mlp")
# The sample length when none is asked for: the model's
# max_position_embeddings, at most this (the papers' 2048).
DEFAULT_SEQLEN = 2048
DTYPES = ("BF16", "F16", "F32")

# Where a decoder layer's tensors and the token embeddings are, in the
# checkpoints of the supported model types (their *ForCausalLM modules).
LAYERS = "model.layers"
EMBEDDINGS = "model.embed_tokens"
_TARGET = re.compile(r"^model\.layers\.(\d+)\.(.+)\.weight$")


@dataclass(frozen=True)
class Target:
    """One weight to decide: its tensor name, safetensors dtype and [n, k]
    shape, the decoder layer it belongs to and its module path inside that
    layer (e.g. "self_attn.q_proj")."""

    name: str
    dtype: str
    shape: Tuple[int, int]
    layer: int
    module: str


@dataclass(frozen=True)
class Plan:
    """A checked calibration: the model as given, its directory and
    config, the samples' length, its decoder layer count, the targets in
    layer and name order, and every tensor of the checkpoint
    (sfsurgery.layout.read_tensors)."""

    model: str
    directory: str
    config: dict
    seqlen: int
    layers: int
    targets: Tuple[Target, ...]
    tensors: Dict[str, layout.TensorInfo]

    def by_layer(self) -> List[List[Target]]:
        """The targets of each decoder layer, in layer order."""
        out: List[List[Target]] = [[] for _ in range(self.layers)]
        for t in self.targets:
            out[t.layer].append(t)
        return out


def output_path(path: str, force: bool) -> str:
    """Checks where the decisions file goes: its directory exists, and the
    path is not a directory, nor an existing file unless force. Returns the
    absolute path."""
    full = os.path.abspath(path)
    parent = os.path.dirname(full)
    if not os.path.isdir(parent):
        raise InputError(f"{path}: directory {parent} does not exist")
    if os.path.isdir(full):
        raise InputError(f"{path}: is a directory; -o names the decisions file")
    if os.path.lexists(full) and not force:
        raise InputError(f"{path}: exists; --force replaces it")
    return full


def default_seqlen(config: dict) -> int:
    """The samples' length when none is asked for: max_position_embeddings
    (when config.json has one), at most DEFAULT_SEQLEN."""
    most = config.get("max_position_embeddings")
    if isinstance(most, int) and not isinstance(most, bool) and most >= 2:
        return min(DEFAULT_SEQLEN, most)
    return DEFAULT_SEQLEN


def check_seqlen(seqlen: int, max_positions: object, where: str) -> None:
    """Raises InputError when seqlen is above the model's
    max_position_embeddings (when it has one)."""
    if isinstance(max_positions, int) and not isinstance(max_positions, bool) and seqlen > max_positions:
        raise InputError(f"{where}: --seqlen {seqlen} is above the model's max_position_embeddings {max_positions}")


def check_config(config: dict, where: str, seqlen: int) -> int:
    """Checks that config (config.json at where) is a supported decoder-only
    model for samples of seqlen tokens; returns its decoder layer count."""
    mt = config.get("model_type")
    if mt not in SUPPORTED_TYPES:
        raise InputError(f"{where}: model_type {mt!r}: calibrate supports {', '.join(SUPPORTED_TYPES)}")
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise InputError(f"{where}: num_hidden_layers {layers!r}: want a positive integer")
    check_seqlen(seqlen, config.get("max_position_embeddings"), where)
    window = config.get("sliding_window")
    sliding = mt == "mistral" or (mt == "qwen2" and config.get("use_sliding_window") is True)
    if sliding and isinstance(window, int) and not isinstance(window, bool) and 0 < window < seqlen:
        raise InputError(f"{where}: --seqlen {seqlen} is above the sliding window of {window} tokens; calibrate attends over whole samples")
    return layers


def check_tokenizer(directory: str) -> None:
    """Raises InputError when the model directory has no tokenizer file."""
    if not any(os.path.isfile(os.path.join(directory, f)) for f in TOKENIZER_FILES):
        raise InputError(f"{directory}: no tokenizer ({', '.join(TOKENIZER_FILES)}): calibration text is tokenized by the model's tokenizer")


def dry_run_command(model: str, scope: str) -> List[str]:
    """The prune command whose plan lists the targets (argv without the
    binary). --format dense: every target a format could leave dense is
    still decided."""
    return ["prune", model, "--dry-run", "--json", "--format", "dense", "--scope", scope]


def prune_targets(model: str, scope: str) -> List[dict]:
    """Runs `sfsurgery prune MODEL --dry-run --json --format dense --scope
    S` (the binary from $SFSURGERY_BIN or PATH) and returns its targets
    (objects with name, dtype, shape)."""
    out = tool.run(dry_run_command(model, scope), InputError, "calibrate takes its targets from sfsurgery prune --dry-run")
    try:
        targets = json.loads(out)["targets"]
        if not isinstance(targets, list):
            raise TypeError("targets is not a list")
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"sfsurgery prune --dry-run --json: not a plan ({e})") from None
    return targets


def layer_targets(model: str, listed: Sequence[dict], layers: int, tensors: Dict[str, layout.TensorInfo]) -> Tuple[Target, ...]:
    """Maps prune's targets to decoder layers and modules, checked against
    the checkpoint's tensors; refuses a target outside the decoder layers,
    or one of a dtype or shape calibration cannot decide."""
    out = []
    for t in listed:
        try:
            name, dtype, shape = t["name"], t["dtype"], tuple(t["shape"])
        except (KeyError, TypeError):
            raise InputError(f"sfsurgery prune --dry-run: malformed target {t!r}") from None
        m = _TARGET.match(name)
        if not m or int(m.group(1)) >= layers:
            raise InputError(f"{model}: target {name} is not a projection of one of the {layers} decoder layers; calibrate decides those only")
        if dtype not in DTYPES:
            raise InputError(f"{model}: target {name} is {dtype}; calibrate decides BF16, F16 and F32 weights")
        if len(shape) != 2 or shape[1] % 4 or shape[0] < 1 or shape[1] < 4:
            raise InputError(f"{model}: target {name} has shape {list(shape)}; want [n, k] with k a multiple of 4")
        info = tensors.get(name)
        if info is None or info.dtype != dtype or tuple(info.shape) != shape:
            got = "missing" if info is None else f"{info.dtype} {list(info.shape)}"
            raise CheckpointError(f"{model}: target {name}: prune lists {dtype} {list(shape)}, the checkpoint holds {got}")
        out.append(Target(name, dtype, (int(shape[0]), int(shape[1])), int(m.group(1)), m.group(2)))
    if not out:
        raise InputError(f"{model}: no target projections")
    return tuple(sorted(out, key=lambda x: (x.layer, x.name)))


def make(model: str, scope: str, seqlen: Optional[int] = None, tokenizer: bool = True) -> Plan:
    """Checks the model for a calibration of samples of seqlen tokens
    (default_seqlen when None) with the targets of scope, and returns the
    plan. tokenizer=False skips the tokenizer check, for callers that
    bring token ids of their own."""
    if scope not in SCOPES:
        raise InputError(f"--scope {scope!r}: want one of {', '.join(SCOPES)}")
    directory = layout.model_directory(model)
    where = os.path.join(directory, "config.json")
    config = layout.read_config(directory)
    if seqlen is None:
        seqlen = default_seqlen(config)
    layers = check_config(config, where, seqlen)
    if tokenizer:
        check_tokenizer(directory)
    tensors = layout.read_tensors(model)
    embed = EMBEDDINGS + ".weight"
    if embed not in tensors:
        raise CheckpointError(f"{model}: no {embed}: calibration starts from the token embeddings")
    targets = layer_targets(model, prune_targets(model, scope), layers, tensors)
    return Plan(model, directory, config, seqlen, layers, targets, tensors)
