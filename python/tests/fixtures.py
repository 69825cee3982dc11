"""Shared test fixtures: the repository's paths, a pruned checkpoint made
by the sfsurgery binary, and launch documents as `sfsurgery plan` writes
them."""

import atexit
import copy
import json
import os
import shutil
import struct
import subprocess
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
TINY = os.path.join(REPO, "testdata", "tiny-llama-bf16")
TINY_FP16 = os.path.join(REPO, "testdata", "tiny-llama-fp16")


def sfsurgery_bin() -> str:
    """The sfsurgery binary the tests run: $SFSURGERY_BIN (python/test.sh
    builds it)."""
    exe = os.environ.get("SFSURGERY_BIN")
    if not exe or not os.access(exe, os.X_OK):
        raise RuntimeError("set SFSURGERY_BIN to an sfsurgery binary (python/test.sh builds one)")
    return exe


_PRUNED = {}


def pruned(src: str = TINY, fmt: str = "ampere") -> str:
    """Prunes src once per test process and returns the output directory,
    which is removed when the process exits."""
    key = (src, fmt)
    if key not in _PRUNED:
        tmp = tempfile.mkdtemp(prefix="sfsurgery-test-")
        atexit.register(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, os.path.basename(src) + "-" + fmt)
        subprocess.run([sfsurgery_bin(), "prune", src, "-o", out, "--format", fmt, "--quiet"], check=True)
        _PRUNED[key] = out
    return _PRUNED[key]


def golden_launches() -> dict:
    """`sfsurgery plan testdata/tiny-llama-bf16 --limits h100 --json`, as
    committed (cmd/sfsurgery's TestPythonGoldenLaunches keeps it current)."""
    with open(os.path.join(TESTDATA, "launches-tiny-h100.json")) as f:
        return json.load(f)


def first_record(doc: dict) -> dict:
    """A deep copy of the first record of a launch document."""
    return copy.deepcopy(doc["shapes"][0]["launches"][0]["launch"])


_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I16": 2, "I64": 8, "U8": 1}


def write_safetensors(path: str, tensors: dict) -> None:
    """Writes a well-formed safetensors file of the given tensors (name →
    (dtype, shape)), laid out one after another, zero-filled."""
    header, off = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = _SIZES[dtype]
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + size]}
        off += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + bytes(off))
