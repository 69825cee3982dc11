"""Checkpoint contents: the ampere output's config and tensors, and what
is refused (CPU only)."""

import json
import os
import shutil
import struct
import tempfile
import unittest

from fixtures import REPO, TINY, pruned, write_safetensors

from sfsurgery import layout
from sfsurgery.errors import CheckpointError


HEADER_CORPUS = os.path.join(REPO, "checkpoint", "testdata", "header")
def one_module(n=64, k=128, packed="BF16", meta_shape=None, shape_shape=(2, 1), shape_dtype="I64", bias=None):
    """The three tensors of one pruned module "m.q_proj" (and its bias)."""
    t = {
        "m.q_proj.shape": (shape_dtype, shape_shape),
        "m.q_proj.packed": (packed, (n, k // 2)),
        "m.q_proj.meta": ("I16", meta_shape or (n, k // 16)),
    }
    if bias:
        t["m.q_proj.bias"] = bias
    return t


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

    def test_dense_output_refused(self):
        with self.assertRaisesRegex(CheckpointError, "no quantization_config: not an `sfsurgery prune --format ampere` output"):
            layout.sparse_config(layout.read_config(TINY))
        with self.assertRaisesRegex(CheckpointError, "quantization_config is 'compressed-tensors', not sfsurgery's"):
            layout.sparse_config(layout.read_config(pruned(fmt="bitmask")))

    def test_files(self):
        out = pruned()
        tensors = layout.read_tensors(out)
        shards = {os.path.basename(t.path) for t in tensors.values()}
        self.assertEqual(shards, {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
        one = next(t.path for t in tensors.values())
        self.assertEqual({t.path for t in layout.read_tensors(one).values()}, {one})
        self.assertTrue(all(os.path.isfile(t.path) for t in tensors.values()))
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(CheckpointError, r"sfsurgery inspect: .*" + d):
                layout.read_tensors(d)


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
    """Modules the kernels cannot serve are refused, naming the file and
    tensor; every malformed safetensors file the Go reader refuses is
    refused."""

    def check(self, tensors, want, targets=("m.q_proj",)):
        with tempfile.TemporaryDirectory() as d:
            write_safetensors(os.path.join(d, "model.safetensors"), tensors)
            with self.assertRaisesRegex(CheckpointError, want):
                layout.sparse_modules(layout.read_tensors(d), list(targets))

    def test_good(self):
        t = one_module(bias=("BF16", (64,)))
        with tempfile.TemporaryDirectory() as d:
            write_safetensors(os.path.join(d, "model.safetensors"), t)
            (m,) = layout.sparse_modules(layout.read_tensors(d), ["m.q_proj"])
            self.assertEqual(m, layout.SparseModule("m.q_proj", 64, 128, "bf16", "m.q_proj.bias"))

    def test_table(self):
        cases = [
            ("missing module", one_module(), "m.k_proj: no m.k_proj.packed", ("m.k_proj",)),
            ("f32", one_module(packed="F32"), "packed is F32; the kernels take BF16 and F16", None),
            ("rows", one_module(n=48), r"weight 48x128; the kernels need rows % 32", None),
            ("columns", one_module(k=96), r"weight 64x96", None),
            ("shape tensor dtype", one_module(shape_dtype="I16"), r"m.q_proj.shape: I16 \[2, 1\], want I64 \[2, 1\]", None),
            ("shape tensor shape", one_module(shape_shape=(2,)), r"m.q_proj.shape: I64 \[2\], want I64 \[2, 1\]", None),
            ("meta shape", one_module(meta_shape=(64, 4)), r"meta I16 \[64, 4\], want I16 \[64, 8\]", None),
            ("bias dtype", one_module(bias=("F16", (64,))), r"m.q_proj.bias: F16 \[64\], want BF16 \[64\]", None),
        ]
        for name, t, want, targets in cases:
            with self.subTest(name):
                self.check(t, want, targets or ("m.q_proj",))

    def test_header_corpus(self):
        """The Go reader's conformance corpus (checkpoint/testdata/header):
        each invalid-* file is refused, as a single file and as a model
        directory's model.safetensors, and each valid-* file reads with the
        names its header has."""
        names = sorted(os.listdir(HEADER_CORPUS))
        invalid = [n for n in names if n.startswith("invalid-")]
        valid = [n for n in names if n.startswith("valid-")]
        self.assertGreaterEqual(len(invalid), 21, "the corpus is missing: the test proves nothing")
        self.assertTrue(valid)
        for name in invalid:
            with self.subTest(name), tempfile.TemporaryDirectory() as d:
                p = os.path.join(d, "model.safetensors")
                shutil.copyfile(os.path.join(HEADER_CORPUS, name), p)
                for target in (p, d):
                    with self.assertRaisesRegex(CheckpointError, r"sfsurgery inspect: ") as cm:
                        layout.read_tensors(target)
                    self.assertNotIn("\n", str(cm.exception))
        for name in valid:
            with self.subTest(name):
                path = os.path.join(HEADER_CORPUS, name)
                with open(path, "rb") as f:
                    (size,) = struct.unpack("<Q", f.read(8))
                    header = json.loads(f.read(size))
                want = sorted(k for k in header if k != "__metadata__")
                self.assertEqual(sorted(layout.read_tensors(path)), want)

    def test_index_names_a_tensor_twice(self):
        """Two shards holding one tensor name are refused by the Go reader."""
        with tempfile.TemporaryDirectory() as d:
            write_safetensors(os.path.join(d, "a.safetensors"), one_module())
            write_safetensors(os.path.join(d, "b.safetensors"), {"m.q_proj.packed": ("BF16", (64, 64)), "x": ("BF16", (2,))})
            weight_map = {n: "a.safetensors" for n in one_module()}
            weight_map["x"] = "b.safetensors"
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"weight_map": weight_map}, f)
            with self.assertRaisesRegex(CheckpointError, r"sfsurgery inspect: .*m\.q_proj\.packed"):
                layout.read_tensors(d)


if __name__ == "__main__":
    unittest.main()
