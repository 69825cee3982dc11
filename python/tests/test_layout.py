"""Checkpoint contents: the ampere output's config and tensors, and what
is refused (CPU only)."""

import json
import os
import shutil
import struct
import tempfile
import unittest

from fixtures import TINY, pruned

from sfsurgery import layout
from sfsurgery.errors import CheckpointError


def write_safetensors(path, tensors, data=b""):
    """Writes a safetensors file of the given header entries (name →
    (dtype, shape, (begin, end))) followed by data."""
    header = {n: {"dtype": d, "shape": list(s), "data_offsets": list(o)} for n, (d, s, o) in tensors.items()}
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def framed(header: bytes) -> bytes:
    """A header with its length in front, as safetensors frames it."""
    return struct.pack("<Q", len(header)) + header


def one_module(n=64, k=128, packed="BF16", meta_shape=None, shape_vals=None, bias=None):
    """The three tensors of one pruned module "m.q_proj", and their bytes."""
    nk = shape_vals or (n, k)
    pb, mb = n * k // 2 * 2, n * k // 16 * 2
    t = {
        "m.q_proj.shape": ("I64", (2, 1), (0, 16)),
        "m.q_proj.packed": (packed, (n, k // 2), (16, 16 + pb)),
        "m.q_proj.meta": ("I16", meta_shape or (n, k // 16), (16 + pb, 16 + pb + mb)),
    }
    data = struct.pack("<qq", *nk) + bytes(pb + mb)
    if bias:
        t["m.q_proj.bias"] = (bias[0], bias[1], (len(data), len(data) + 2 * bias[1][0]))
        data += bytes(2 * bias[1][0])
    return t, data


class AmpereOutputTest(unittest.TestCase):
    """A real `sfsurgery prune --format ampere` output maps to modules."""

    def test_modules(self):
        out = pruned()
        cfg = layout.read_config(out)
        q = layout.sparse_config(cfg)
        tensors = layout.read_tensors(out)
        mods = layout.sparse_modules(tensors, q["targets"])
        self.assertEqual(len(mods), 28)
        want = {"q_proj": (256, 256), "k_proj": (128, 256), "v_proj": (128, 256), "o_proj": (256, 256),
                "gate_proj": (768, 256), "up_proj": (768, 256), "down_proj": (256, 768)}
        for m in mods:
            self.assertEqual((m.n, m.k), want[m.name.rsplit(".", 1)[1]], m.name)
            self.assertEqual(m.dtype, "bf16")
            self.assertIsNone(m.bias)
        st = layout.stacks(mods)
        self.assertEqual(sorted((s.parent, s.op, s.n, s.k) for s in st)[:2],
                         [("model.layers.0.mlp", "gate_up", 1536, 256), ("model.layers.0.self_attn", "qkv", 512, 256)])
        self.assertEqual(len(st), 8)

    def test_dense_output_refused(self):
        with self.assertRaisesRegex(CheckpointError, "no quantization_config: not an `sfsurgery prune --format ampere` output"):
            layout.sparse_config(layout.read_config(TINY))
        with self.assertRaisesRegex(CheckpointError, "quantization_config is 'compressed-tensors', not sfsurgery's"):
            layout.sparse_config(layout.read_config(pruned(fmt="bitmask")))

    def test_files(self):
        out = pruned()
        files = layout.checkpoint_files(out)
        self.assertEqual([os.path.basename(f) for f in files], ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
        self.assertEqual(layout.checkpoint_files(files[0]), [files[0]])
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(CheckpointError, "no model.safetensors or model.safetensors.index.json"):
                layout.checkpoint_files(d)


class ConfigTest(unittest.TestCase):
    def test_table(self):
        good = {"quant_method": "sfsurgery", "format": "ampere", "targets": ["a"], "ignore": []}
        cases = [
            ("not an object", {"quantization_config": "x"}, "is not an object"),
            ("other format", {"quantization_config": dict(good, format="bitmask")}, "sfsurgery format 'bitmask'"),
            ("targets", {"quantization_config": dict(good, targets="a")}, "targets is not a list"),
            ("other method", {"quantization_config": dict(good, quant_method="gptq")}, "'gptq', not sfsurgery's"),
        ]
        for name, cfg, want in cases:
            with self.subTest(name):
                with self.assertRaisesRegex(CheckpointError, want):
                    layout.sparse_config(cfg)
        self.assertEqual(layout.sparse_config({"quantization_config": good})["targets"], ["a"])

    def test_read_config(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(CheckpointError, "config.json"):
                layout.read_config(d)
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write("[1]")
            with self.assertRaisesRegex(CheckpointError, "not a JSON object"):
                layout.read_config(d)


class TensorTest(unittest.TestCase):
    """Malformed files and modules the kernels cannot serve are refused,
    naming the file and tensor."""

    def check(self, tensors, data, want, targets=("m.q_proj",)):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "model.safetensors")
            write_safetensors(p, tensors, data)
            with self.assertRaisesRegex(CheckpointError, want):
                layout.sparse_modules(layout.read_tensors(d), list(targets))

    def test_good(self):
        t, data = one_module(bias=("BF16", (64,)))
        with tempfile.TemporaryDirectory() as d:
            write_safetensors(os.path.join(d, "model.safetensors"), t, data)
            (m,) = layout.sparse_modules(layout.read_tensors(d), ["m.q_proj"])
            self.assertEqual(m, layout.SparseModule("m.q_proj", 64, 128, "bf16", "m.q_proj.bias"))

    def test_table(self):
        cases = [
            ("missing module", one_module(), "m.k_proj: no m.k_proj.packed", ("m.k_proj",)),
            ("f32", one_module(packed="F32"), "packed is F32; the kernels take BF16 and F16", None),
            ("rows", one_module(n=48), r"weight 48x128; the kernels need rows % 32", None),
            ("columns", one_module(k=96), r"weight 64x96", None),
            ("shape tensor disagrees", one_module(shape_vals=(64, 256)), r"packed \[64, 64\], want \[64, 128\]", None),
            ("meta shape", one_module(meta_shape=(64, 4)), r"meta I16 \[64, 4\], want I16 \[64, 8\]", None),
            ("bias dtype", one_module(bias=("F16", (64,))), r"m.q_proj.bias: F16 \[64\], want BF16 \[64\]", None),
        ]
        for name, (t, data), want, targets in cases:
            with self.subTest(name):
                self.check(t, data, want, targets or ("m.q_proj",))

    def test_malformed_files(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.safetensors")
            cases = [
                ("short", b"\x01\x02", "shorter than a safetensors header"),
                ("huge header", struct.pack("<Q", 1 << 40), "header of"),
                ("cut header", struct.pack("<Q", 100) + b"{}", "header cut short"),
                ("not json", struct.pack("<Q", 2) + b"{x", "header is not JSON"),
                ("offsets past the end", framed(b'{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,400]}}') + bytes(4), "'a': malformed"),
                ("negative shape", framed(b'{"a":{"dtype":"F16","shape":[-2],"data_offsets":[0,4]}}') + bytes(4), "'a': malformed"),
                ("not an object", framed(b'[1]'), "header is not an object"),
            ]
            for name, raw, want in cases:
                with self.subTest(name):
                    with open(p, "wb") as f:
                        f.write(raw)
                    with self.assertRaisesRegex(CheckpointError, want):
                        layout.read_header(p)

    def test_duplicate_across_shards(self):
        t, data = one_module()
        with tempfile.TemporaryDirectory() as d:
            for name in ("a.safetensors", "b.safetensors"):
                write_safetensors(os.path.join(d, name), t, data)
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}, f)
            with self.assertRaisesRegex(CheckpointError, "also in"):
                layout.read_tensors(d)


if __name__ == "__main__":
    unittest.main()
