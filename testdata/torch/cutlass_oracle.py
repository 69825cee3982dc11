"""Oracle for sfsurgery's ampere format, run where PyTorch is installed.

    python3 cutlass_oracle.py DENSE_DIR AMPERE_DIR [BITMASK_DIR] > tiny-llama-bf16-ampere.json

For every target of DENSE_DIR (sfsurgery prune --format dense), it runs
PyTorch's own sparse_semi_structured_from_dense_cutlass on the pruned
weight and records the SHA-256 of the packed values and the metadata it
produces, and compares them with what sfsurgery wrote in AMPERE_DIR. It
also loads every output file with Python's safetensors, the reference
reader. The JSON it prints is committed as testdata/torch/*.json and
checked by surgery's TestTorchGolden.
"""
import glob
import hashlib
import json
import os
import sys

import safetensors
import torch
from safetensors import safe_open
from torch.sparse._semi_structured_conversions import (
    sparse_semi_structured_from_dense_cutlass,
)


def tensors(d):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with safe_open(f, "pt") as s:
            meta = s.metadata() or {}
            for k in s.keys():
                out[k] = s.get_tensor(k)
            if "sfsurgery" in meta:
                out.setdefault("__targets__", {}).update(json.loads(meta["sfsurgery"])["targets"])
    return out


def sha(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


dense = tensors(sys.argv[1])
amp = tensors(sys.argv[2])
for d in sys.argv[3:]:
    tensors(d)  # the reference reader must load it
golden, bad = {}, 0
for name in sorted(dense["__targets__"]):
    w = dense[name]
    packed, meta = sparse_semi_structured_from_dense_cutlass(w)
    base = name[: -len(".weight")]
    g = {"packed_sha256": sha(packed), "meta_sha256": sha(meta),
         "packed_shape": list(packed.shape), "meta_shape": list(meta.shape), "meta_dtype": str(meta.dtype)}
    ours = {"packed_sha256": sha(amp[base + ".packed"]), "meta_sha256": sha(amp[base + ".meta"])}
    if ours["packed_sha256"] != g["packed_sha256"] or ours["meta_sha256"] != g["meta_sha256"]:
        bad += 1
        print("MISMATCH", name, file=sys.stderr)
    golden[name] = g
json.dump({"torch": torch.__version__, "safetensors": safetensors.__version__, "tensors": golden},
          sys.stdout, indent=1, sort_keys=True)
print(f"{len(golden)} targets, {bad} mismatches against torch", file=sys.stderr)
sys.exit(1 if bad else 0)
