# gen_golden.py writes the golden files of writer_test.go with the reference
# implementation (Python safetensors + torch), so the Go writer's bytes are
# checked against the reference, not against themselves.
#
#   python3 gen_golden.py OUTDIR
#
# The tensor list and the data rule must match goldenSpecs in writer_test.go:
# byte j of the i-th tensor (in list order) is (i*31 + j*7 + 1) & 0xff,
# and & 1 for BOOL.
import sys

import safetensors
import torch
from safetensors.torch import save_file

DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8,
    "I16": torch.int16, "U16": torch.uint16, "F16": torch.float16,
    "BF16": torch.bfloat16, "I32": torch.int32, "U32": torch.uint32,
    "F32": torch.float32, "F64": torch.float64, "I64": torch.int64,
    "U64": torch.uint64, "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2, "C64": torch.complex64,
}

MIXED = [
    ("b.weight", "BF16", [2, 3]),
    ("a.weight", "F16", [3]),
    ("a.bias", "BF16", [3]),
    ("scale", "F32", []),
    ("ids", "I64", [2]),
    ("f64", "F64", [1]),
    ("mask", "BOOL", [5]),
    ("bytes", "U8", [3]),
    ("i8", "I8", [1]),
    ("fp8", "F8_E4M3", [4]),
    ("fp8b", "F8_E5M2", [2]),
    ("count", "I32", [1]),
    ("u32", "U32", [1]),
    ("i16", "I16", [3]),
    ("empty", "BF16", [0, 4]),
    ("q\"uote\\back\n\t\x01<&>\u00e9\u20ac\u2028", "F32", [1]),
    ("u16", "U16", [2]),
    ("u64", "U64", [1]),
    ("c64", "C64", [1]),
]

SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
        "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4,
        "F32": 4, "F64": 8, "I64": 8, "U64": 8, "C64": 8}


def tensors(specs):
    out = {}
    for i, (name, dt, shape) in enumerate(specs):
        n = SIZE[dt]
        for d in shape:
            n *= d
        mask = 1 if dt == "BOOL" else 0xFF
        data = bytearray((i * 31 + j * 7 + 1) & mask for j in range(n))
        if n == 0:
            t = torch.empty(shape, dtype=DTYPES[dt])
        else:
            t = torch.frombuffer(data, dtype=torch.uint8).view(DTYPES[dt]).reshape(shape)
        out[name] = t
    return out


def main():
    out = sys.argv[1]
    print("safetensors", safetensors.__version__, "torch", torch.__version__)
    save_file(tensors(MIXED), out + "/writer_golden.safetensors", metadata={"format": "pt"})
    save_file(tensors([("t", "I32", [2, 2])]), out + "/writer_golden_meta.safetensors",
              metadata={"k\u00e9y": "v<&>\"\\\n\t\x01\x7f\u2028\u00e9/"})
    save_file({}, out + "/writer_golden_empty.safetensors")
    for f in ("writer_golden", "writer_golden_meta", "writer_golden_empty"):
        b = open(out + "/" + f + ".safetensors", "rb").read()
        n = int.from_bytes(b[:8], "little")
        print(f, len(b), n, b[8:8 + n])


main()
