"""`python -m sfsurgery calibrate` without a GPU: its arguments, every
refusal before calibration (one line, exit 2, nothing written), the plan
(targets from `sfsurgery prune --dry-run --json`), the decisions file's
header and metadata, and the text → samples steps. Standard library only
(CI); the tests that ask the Go side for targets need $SFSURGERY_BIN
(python/test.sh builds it)."""

import argparse
import contextlib
import io
import json
import os
import shutil
import struct
import tempfile
import unittest
from unittest import mock

from fixtures import TINY, write_safetensors
from sfsurgery import calibrate as calibrate_command
from sfsurgery import cli, layout, text, tool
from sfsurgery.calibrate import command, data, output, plan
from sfsurgery.errors import CheckpointError, InputError

HAVE_BIN = bool(os.environ.get("SFSURGERY_BIN"))


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m sfsurgery calibrate")
    command.add_arguments(p)
    return p.parse_args(argv)


def calibrate(argv):
    """Runs `python -m sfsurgery calibrate ARGV` in-process; returns (exit
    status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["calibrate"] + argv, commands=(calibrate_command,))
    return code, out.getvalue(), err.getvalue()


class Model:
    """A temporary model directory: the tiny checkpoint's files linked, a
    placeholder tokenizer, config.json changed as asked."""

    def __init__(self, tmp, name="m", tokenizer=True, **config):
        self.path = os.path.join(tmp, name)
        os.mkdir(self.path)
        for f in os.listdir(TINY):
            if f != "config.json":
                os.symlink(os.path.join(TINY, f), os.path.join(self.path, f))
        with open(os.path.join(TINY, "config.json")) as f:
            cfg = json.load(f)
        cfg.update(config)
        with open(os.path.join(self.path, "config.json"), "w") as f:
            json.dump(cfg, f)
        if tokenizer:
            with open(os.path.join(self.path, "tokenizer.json"), "w") as f:
                f.write("{}")


class ArgumentsTest(unittest.TestCase):
    def test_defaults(self):
        a = parse(["m", "--method", "wanda", "--text", "t.txt", "-o", "o"])
        self.assertEqual((a.samples, a.seqlen, a.seed, a.scope, a.force, a.json), (128, None, 0, "all", False, False))

    def test_required_and_choices(self):
        for argv in (["m", "--text", "t", "-o", "o"], ["m", "--method", "magnitude", "--text", "t", "-o", "o"],
                     ["m", "--method", "ria", "-o", "o"], ["m", "--method", "ria", "--text", "t"],
                     ["m", "--method", "ria", "--text", "t", "-o", "o", "--scope", "ffn"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as cm:
                parse(argv)
            self.assertEqual(cm.exception.code, 2)

    def test_help(self):
        self.assertNotIn("\n", command.HELP)
        p = argparse.ArgumentParser(prog="python -m sfsurgery calibrate")
        command.add_arguments(p)
        h = p.format_help()
        for want in ("sfsurgery prune MODEL --decisions", "wanda", "ria", "sparsegpt", "--scope", "--seqlen"):
            self.assertIn(want, h)


class RefusalTest(unittest.TestCase):
    """Each refusal: exit 2, one line naming what and where, and nothing
    new in the output's directory."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sfsurgery-calibrate-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.out = os.path.join(self.tmp, "out")
        os.mkdir(self.out)
        self.text = os.path.join(self.tmp, "calib.txt")
        with open(self.text, "w") as f:
            f.write("some calibration text\n" * 100)

    def refused(self, argv, want, code=2):
        before = sorted(os.listdir(self.out))
        got, stdout, stderr = calibrate(argv)
        self.assertEqual(got, code, stderr)
        self.assertEqual(stdout, "")
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertRegex(stderr, want)
        self.assertTrue(stderr.startswith("sfsurgery: "))
        self.assertEqual(sorted(os.listdir(self.out)), before, "nothing written")
        return stderr

    def argv(self, model, *extra, out="x.decisions"):
        return [model, "--method", "wanda", "--text", self.text, "--seqlen", "128", "-o", os.path.join(self.out, out)] + list(extra)

    def test_output(self):
        open(os.path.join(self.out, "old"), "w").close()
        os.mkdir(os.path.join(self.out, "dir"))
        self.refused(self.argv(TINY, out="nodir/x"), r"nodir/x: directory .*/out/nodir does not exist")
        self.refused(self.argv(TINY, out="dir"), r"out/dir: is a directory")
        self.refused(self.argv(TINY, out="old"), r"out/old: exists; --force replaces it")

    def test_numbers(self):
        self.refused(self.argv(TINY, "--samples", "0"), r"--samples 0: want at least 1")
        self.refused(self.argv(TINY, "--seqlen", "1"), r"--seqlen 1: want at least 2 tokens")
        self.refused(self.argv(TINY, "--seed", str(1 << 63)), r"--seed 9223372036854775808: want a 64-bit integer")

    def test_model(self):
        m = Model(self.tmp, "gpt", model_type="gpt2")
        self.refused(self.argv(m.path), r"gpt/config\.json: model_type 'gpt2': calibrate supports llama, mistral, qwen2")
        self.refused(self.argv(os.path.join(self.tmp, "nothing")), r"nothing")
        self.refused(self.argv(os.path.join(TINY, "model-00001-of-00002.safetensors")), r"model-00001-of-00002.safetensors: a file; want a model directory")
        self.refused(self.argv(TINY), r"tiny-llama-bf16: no tokenizer \(tokenizer\.json, tokenizer\.model, .*\): calibration text is tokenized by the model's tokenizer")
        long = Model(self.tmp, "long")
        self.refused(self.argv(long.path, "--seqlen", "512"), r"long/config\.json: --seqlen 512 is above the model's max_position_embeddings 256")
        sw = Model(self.tmp, "mistral", model_type="mistral", sliding_window=128)
        self.refused(self.argv(sw.path, "--seqlen", "200"), r"mistral/config\.json: --seqlen 200 is above the sliding window of 128 tokens")

    def test_binary(self):
        m = Model(self.tmp)
        with mock.patch.dict(os.environ, {tool.ENV_BIN: os.path.join(self.tmp, "no-such-binary")}):
            self.refused(self.argv(m.path), r"no-such-binary: No such file")

    @unittest.skipUnless(HAVE_BIN, "needs $SFSURGERY_BIN")
    def test_text(self):
        m = Model(self.tmp)
        argv = self.argv(m.path)
        argv[argv.index("--text") + 1] = os.path.join(self.tmp, "missing.txt")
        self.refused(argv, r"missing\.txt: No such file")

    @unittest.skipUnless(HAVE_BIN, "needs $SFSURGERY_BIN")
    def test_no_targets(self):
        d = os.path.join(self.tmp, "embeddings-only")
        os.mkdir(d)
        shutil.copy(os.path.join(TINY, "config.json"), d)
        open(os.path.join(d, "tokenizer.json"), "w").close()
        write_safetensors(os.path.join(d, "model.safetensors"), {"model.embed_tokens.weight": ("BF16", (512, 256)), "model.norm.weight": ("BF16", (256,))})
        self.refused(self.argv(d), r"sfsurgery prune: .*embeddings-only: no tensor matches the targets")

    @unittest.skipUnless(HAVE_BIN, "needs $SFSURGERY_BIN")
    def test_no_gpu(self):
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            self.skipTest("a GPU is present")
        m = Model(self.tmp)
        self.refused(self.argv(m.path), r"calibrate needs torch and transformers" if torch is None else r"no CUDA GPU: calibrate runs on one NVIDIA GPU")


class PlanTest(unittest.TestCase):
    def test_check_config(self):
        base = {"model_type": "llama", "num_hidden_layers": 4, "max_position_embeddings": 256}
        self.assertEqual(plan.check_config(base, "c", 256), 4)
        self.assertEqual(plan.check_config({"model_type": "qwen2", "num_hidden_layers": 2, "sliding_window": 64, "use_sliding_window": False}, "c", 512), 2)
        self.assertEqual(plan.check_config({"model_type": "llama", "num_hidden_layers": 1}, "c", 1 << 20), 1)
        for cfg, want in [
            ({**base, "model_type": "phi3"}, "model_type 'phi3'"),
            ({**base, "num_hidden_layers": 0}, "num_hidden_layers 0"),
            ({**base, "num_hidden_layers": True}, "num_hidden_layers True"),
            ({**base, "max_position_embeddings": 128}, "above the model's max_position_embeddings 128"),
            ({**base, "model_type": "mistral", "sliding_window": 100}, "sliding window of 100"),
            ({**base, "model_type": "qwen2", "sliding_window": 100, "use_sliding_window": True}, "sliding window of 100"),
        ]:
            with self.subTest(cfg=cfg), self.assertRaisesRegex(InputError, "^c: .*" + want):
                plan.check_config(cfg, "c", 200)

    def test_layer_targets(self):
        tensors = {
            "model.layers.0.self_attn.q_proj.weight": layout.TensorInfo("model.layers.0.self_attn.q_proj.weight", "BF16", (8, 16), "s", 256),
            "model.layers.1.mlp.down_proj.weight": layout.TensorInfo("model.layers.1.mlp.down_proj.weight", "F32", (16, 8), "s", 512),
        }
        good = [{"name": n, "dtype": t.dtype, "shape": list(t.shape)} for n, t in reversed(list(tensors.items()))]
        got = plan.layer_targets("M", good, 2, tensors)
        self.assertEqual(got, (plan.Target("model.layers.0.self_attn.q_proj.weight", "BF16", (8, 16), 0, "self_attn.q_proj"),
                               plan.Target("model.layers.1.mlp.down_proj.weight", "F32", (16, 8), 1, "mlp.down_proj")))
        p = plan.Plan("M", "d", {}, 16, 3, got, tensors)
        self.assertEqual([[t.module for t in ts] for ts in p.by_layer()], [["self_attn.q_proj"], ["mlp.down_proj"], []])
        q = "model.layers.0.self_attn.q_proj.weight"
        for listed, want, err in [
            ([{"name": "lm_head.weight", "dtype": "BF16", "shape": [8, 16]}], "lm_head.weight is not a projection of one of the 2 decoder layers", InputError),
            ([{"name": "model.layers.2.mlp.up_proj.weight", "dtype": "BF16", "shape": [8, 16]}], "model.layers.2.mlp.up_proj.weight is not a projection", InputError),
            ([{"name": q, "dtype": "I8", "shape": [8, 16]}], "is I8; calibrate decides BF16, F16 and F32", InputError),
            ([{"name": q, "dtype": "BF16", "shape": [8, 18]}], r"has shape \[8, 18\]", InputError),
            ([{"name": q, "dtype": "BF16", "shape": [8, 16, 1]}], r"has shape \[8, 16, 1\]", InputError),
            ([{"name": q, "dtype": "F16", "shape": [8, 16]}], r"prune lists F16 \[8, 16\], the checkpoint holds BF16 \[8, 16\]", CheckpointError),
            ([{"name": "model.layers.0.mlp.up_proj.weight", "dtype": "BF16", "shape": [8, 16]}], "the checkpoint holds missing", CheckpointError),
            ([{"dtype": "BF16"}], "malformed target", InputError),
            ([], "no target projections", InputError),
        ]:
            with self.subTest(want=want), self.assertRaisesRegex(err, want):
                plan.layer_targets("M", listed, 2, tensors)

    def test_default_seqlen(self):
        for cfg, want in [({"max_position_embeddings": 1024}, 1024), ({"max_position_embeddings": 131072}, 2048), ({}, 2048),
                          ({"max_position_embeddings": "x"}, 2048)]:
            self.assertEqual(plan.default_seqlen(cfg), want)

    def test_output_path(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x")
            self.assertEqual(plan.output_path(p, False), p)
            open(p, "w").close()
            self.assertEqual(plan.output_path(p, True), p)
            with self.assertRaisesRegex(InputError, "exists; --force replaces it"):
                plan.output_path(p, False)
            with self.assertRaisesRegex(InputError, "is a directory"):
                plan.output_path(d, True)

    @unittest.skipUnless(HAVE_BIN, "needs $SFSURGERY_BIN")
    def test_make(self):
        with tempfile.TemporaryDirectory() as d:
            m = Model(d)
            for scope, count, per_layer in (("all", 28, 7), ("attn", 16, 4), ("mlp", 12, 3)):
                with self.subTest(scope=scope):
                    p = plan.make(m.path, scope)
                    self.assertEqual(p.seqlen, 256, "max_position_embeddings")
                    self.assertEqual(len(p.targets), count)
                    self.assertEqual([len(ts) for ts in p.by_layer()], [per_layer] * 4)
                    self.assertEqual(p.layers, 4)
                    t = p.by_layer()[2][0]
                    self.assertEqual(t.layer, 2)
                    self.assertEqual(t.name, f"model.layers.2.{t.module}.weight")
                    self.assertEqual(p.tensors[t.name].shape, t.shape)


class DecisionsHeaderTest(unittest.TestCase):
    def test_metadata(self):
        described = {"file": "c.txt", "sha256": "a" * 64, "kind": "plain"}
        for method, params in (("wanda", {}), ("ria", {"alpha": 0.5}), ("sparsegpt", {"dampening": 0.01, "block": 128})):
            with self.subTest(method=method):
                m = output.metadata(method, "org/model", described, 128, 2048, 3)
                self.assertEqual(m, {"schema": "sfsurgery-decisions/1", "method": method, "model": "org/model", "text": described,
                                     "samples": 128, "seqlen": 2048, "seed": 3, "params": params, "tool": output.TOOL})
        self.assertRegex(output.TOOL, r"^sfsurgery-python \d+\.\d+\.\d+$")

    def test_layout(self):
        entries = [output.Entry("b.weight", "BF16", (4, 12)), output.Entry("a.weight", "F32", (3, 8))]
        meta = output.metadata("sparsegpt", "m", {}, 1, 2, 0)
        for updates in (False, True):
            with self.subTest(updates=updates):
                raw, extents, size = output.layout(meta, entries, updates)
                self.assertEqual(len(raw) % 8, 0)
                head = json.loads(raw)
                md = head.pop("__metadata__")
                self.assertEqual(set(md), {"format", "sfsurgery_decisions"})
                self.assertEqual(json.loads(md["sfsurgery_decisions"]), meta)
                want = {"a.weight.mask": ("U8", [3, 1]), "b.weight.mask": ("U8", [4, 2])}
                if updates:
                    want.update({"a.weight.update": ("F32", [3, 8]), "b.weight.update": ("BF16", [4, 12])})
                self.assertEqual({n: (e["dtype"], e["shape"]) for n, e in head.items()}, want)
                for n, e in head.items():
                    self.assertEqual(set(e), {"dtype", "shape", "data_offsets"})
                    self.assertEqual(tuple(e["data_offsets"]), extents[n])
                spans = sorted(extents.values())
                self.assertEqual(spans[0][0], 0)
                self.assertEqual(spans[-1][1], size)
                self.assertTrue(all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "the tensors tile the data section")
                order = [n for n, _ in sorted(extents.items(), key=lambda kv: kv[1])]
                self.assertEqual(order, (["a.weight.update", "b.weight.update"] if updates else []) + ["a.weight.mask", "b.weight.mask"])
                self.assertEqual(size, (3 * 8 * 4 + 4 * 12 * 2 if updates else 0) + 3 * 1 + 4 * 2)

    def test_writer(self):
        meta = output.metadata("wanda", "m", {}, 1, 2, 0)
        entries = [output.Entry("a.weight", "BF16", (2, 12))]
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.safetensors")
            open(p, "w").close()
            with output.open_writer(p, meta, entries, updates=False) as w:
                self.assertEqual(len(os.listdir(d)), 2, "the temporary lies beside the output")
                with self.assertRaisesRegex(KeyError, "a.weight.update: not a tensor"):
                    w.write("a.weight.update", b"")
                w.write("a.weight.mask", bytes([0x33, 0x03, 0x0C, 0x05]))
                with self.assertRaisesRegex(ValueError, "written twice"):
                    w.write("a.weight.mask", bytes(4))
                w.commit()
            self.assertEqual(os.listdir(d), ["x.safetensors"])
            umask = os.umask(0o022)
            os.umask(umask)
            self.assertEqual(os.stat(p).st_mode & 0o777, 0o666 & ~umask, "a plain file's mode, not mkstemp's 0600")
            doc = output.read_metadata(p)
            self.assertEqual(doc["decisions"], meta)
            self.assertEqual(doc["tensors"]["a.weight.mask"], {"dtype": "U8", "shape": [2, 2], "data_offsets": [0, 4]})
            with open(p, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                f.seek(8 + n)
                self.assertEqual(f.read(), bytes([0x33, 0x03, 0x0C, 0x05]))


def read_raw(path):
    """{name: (dtype, shape, bytes)} of a safetensors file (stdlib)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], tuple(v["shape"]), data[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in head.items()}


def kept(r, c):
    """A 2:4 pattern: columns 0, 1 of a group on even rows + groups, 2, 3 otherwise."""
    return (c % 4 < 2) == ((r + c // 4) % 2 == 0)


def mask_bytes(n, k):
    out = bytearray()
    for r in range(n):
        for b in range((k + 7) // 8):
            out.append(sum(1 << j for j in range(8) if 8 * b + j < k and kept(r, 8 * b + j)))
    return bytes(out)


@unittest.skipUnless(HAVE_BIN, "needs $SFSURGERY_BIN")
class DecisionsContractTest(unittest.TestCase):
    """Decisions files as output.Writer writes them, read by `sfsurgery
    prune --decisions` (the Go side of sfsurgery-decisions/1): masks
    alone keep the original's values, updates replace them, and a mask
    that is not 2:4 is refused."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sfsurgery-decisions-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.model = Model(self.tmp).path
        self.plan = plan.make(self.model, "all")
        self.orig = {}
        for f in sorted(os.listdir(TINY)):
            if f.endswith(".safetensors"):
                self.orig.update(read_raw(os.path.join(TINY, f)))

    def write(self, method, mask=mask_bytes, update=None):
        described = {"file": "c.txt", "sha256": "0" * 64, "kind": "plain"}
        meta = output.metadata(method, self.model, described, 4, 64, 0)
        entries = [output.Entry(t.name, t.dtype, t.shape) for t in self.plan.targets]
        path = os.path.join(self.tmp, f"{method}.decisions")
        with output.open_writer(path, meta, entries, updates=update is not None) as w:
            for t in self.plan.targets:
                w.write(output.mask_name(t.name), mask(*t.shape))
                if update is not None:
                    w.write(output.update_name(t.name), update(t))
            w.commit()
        return path

    def prune(self, dec):
        import subprocess

        out = os.path.join(self.tmp, "out-" + os.path.basename(dec))
        r = subprocess.run([os.environ["SFSURGERY_BIN"], "prune", self.model, "--decisions", dec, "--format", "dense", "-o", out, "-q"],
                           capture_output=True, text=True)
        got = {}
        if r.returncode == 0:
            for f in sorted(os.listdir(out)):
                if f.endswith(".safetensors"):
                    got.update(read_raw(os.path.join(out, f)))
        return r, got

    def check(self, got, value):
        for t in self.plan.targets:
            n, k = t.shape
            dtype, shape, raw = got[t.name]
            self.assertEqual((dtype, shape), ("BF16", (n, k)))
            orig = self.orig[t.name][2]
            for r in (0, 1, n - 1):
                for c in range(k):
                    have = raw[2 * (r * k + c) : 2 * (r * k + c) + 2]
                    want = value(orig, r, c, k) if kept(r, c) else b"\0\0"
                    self.assertEqual(have, want, f"{t.name}[{r}][{c}]")

    def test_masks(self):
        for method in ("wanda", "ria"):
            with self.subTest(method=method):
                r, got = self.prune(self.write(method))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.check(got, lambda orig, r, c, k: orig[2 * (r * k + c) : 2 * (r * k + c) + 2])

    def test_updates(self):
        one = struct.pack("<H", 0x3F80)  # bfloat16 1.0

        def update(t):
            n, k = t.shape
            return b"".join(one if kept(r, c) else b"\0\0" for r in range(n) for c in range(k))

        r, got = self.prune(self.write("sparsegpt", update=update))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check(got, lambda orig, r, c, k: one)

    def test_not_2_of_4_refused(self):
        def three(n, k):
            raw = bytearray(mask_bytes(n, k))
            raw[0] |= 0x0F  # row 0, columns 0-3: all four kept
            return bytes(raw)

        dec = self.write("wanda", mask=three)
        r, _ = self.prune(dec)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(dec, r.stderr)
        self.assertIn(".mask", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out-wanda.decisions")))


class SamplesTest(unittest.TestCase):
    def test_chunks(self):
        s = "ab\ncd\nefghijkl\nm"
        for size in (1, 2, 3, 4, 5, 100):
            with self.subTest(size=size):
                parts = data.chunks(s, size)
                self.assertEqual("".join(parts), s)
                self.assertTrue(all(0 < len(p) <= size for p in parts))
        self.assertEqual(data.chunks(s, 4), ["ab\n", "cd\n", "efgh", "ijkl", "\nm"])
        self.assertEqual(data.chunks(s, 100), [s])
        self.assertEqual(data.chunks("", 4), [])

    def test_windows(self):
        ids = list(range(1000))
        got = data.windows(ids, 8, 100, 5, 1000, "t")
        self.assertEqual(got, [ids[o : o + 100] for o in text.samples(1000, 100, 8, 5)])
        self.assertEqual(got, data.windows(ids, 8, 100, 5, 1000, "t"), "seeded")
        self.assertNotEqual(got, data.windows(ids, 8, 100, 6, 1000, "t"))
        self.assertEqual(len(data.windows(ids, 10, 100, 0, 1000, "t")), 10)
        for args, want in [
            ((ids, 11, 100, 0, 1000, "t"), r"^t: 1000 tokens, fewer than the 11 × 100 = 1100 the samples need$"),
            ((ids, 2, 100, 0, 1, "t"), r"^t: token id \d+ is outside the model's vocabulary of 1:"),
            ((ids, 0, 100, 0, 1000, "t"), r"0 samples of 100 tokens"),
        ]:
            with self.subTest(want=want), self.assertRaisesRegex(InputError, want):
                data.windows(*args)


if __name__ == "__main__":
    unittest.main()
