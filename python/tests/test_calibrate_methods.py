"""Calibration's arithmetic on the CPU: the 2:4 choice and its ties,
Wanda, RIA and SparseGPT against loop-by-loop definitions and against the
plain reference (reference_calibration.py, in float64), the mask bit
layout, the decisions file written and read back, and the block-sequential
driver against the reference's layer-by-layer loop on a small float64
model. Skipped without torch."""

import os
import tempfile
import types
import unittest
from unittest import mock

try:
    import torch
    from torch import nn
except ImportError:
    torch = None

if torch is not None:
    import reference_calibration as ref
    from sfsurgery.calibrate import methods, output, stream
    from sfsurgery.calibrate.errors import CalibrationError
    from sfsurgery.calibrate.plan import Target

NEEDS = "needs torch"


def keep_loop(scores):
    """The 2:4 rule, one group at a time: the 2 highest scores, ties to the
    lower index, NaN below everything."""
    rows, k = scores.shape
    out = torch.zeros((rows, k), dtype=torch.bool)
    for r in range(rows):
        for g in range(0, k, 4):
            vals = [float(scores[r, g + j]) for j in range(4)]
            vals = [float("-inf") if v != v else v for v in vals]
            order = sorted(range(4), key=lambda j: (-vals[j], j))
            for j in order[:2]:
                out[r, g + j] = True
    return out


def random_hessian(k, tokens=300, dead=(), seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((tokens, k), generator=gen, dtype=torch.float64)
    x = x @ (torch.eye(k, dtype=torch.float64) + 0.3 * torch.randn((k, k), generator=gen, dtype=torch.float64))
    for j in dead:
        x[:, j] = 0
    return x, 2 * x.t() @ x / tokens


@unittest.skipUnless(torch is not None, NEEDS)
class KeepTest(unittest.TestCase):
    def test_against_loop(self):
        gen = torch.Generator().manual_seed(1)
        for trial in range(20):
            with self.subTest(trial=trial):
                s = torch.randint(0, 3, (9, 24), generator=gen).to(torch.float32)  # many ties
                if trial % 2:
                    s[torch.rand(s.shape, generator=gen) < 0.1] = float("nan")
                    s[torch.rand(s.shape, generator=gen) < 0.1] = float("inf")
                    s[torch.rand(s.shape, generator=gen) < 0.1] = float("-inf")
                got = methods.keep_2_of_4(s)
                self.assertTrue(torch.equal(got, keep_loop(s)))
                self.assertTrue(bool((got.view(9, 6, 4).sum(-1) == 2).all()))

    def test_ties_to_the_lower_index(self):
        cases = [
            ([1, 1, 1, 1], [1, 1, 0, 0]),
            ([0, 5, 5, 5], [0, 1, 1, 0]),
            ([2, 1, 2, 1], [1, 0, 1, 0]),
            ([1, 2, 1, 2], [0, 1, 0, 1]),
            ([3, 3, 9, 3], [1, 0, 1, 0]),
            ([float("nan")] * 4, [1, 1, 0, 0]),
            ([float("nan"), 0, float("nan"), -1], [0, 1, 0, 1]),
            ([float("-inf"), float("nan"), 0, float("-inf")], [1, 0, 1, 0]),
        ]
        for s, want in cases:
            with self.subTest(s=s):
                got = methods.keep_2_of_4(torch.tensor([s], dtype=torch.float64))
                self.assertEqual(got.int().tolist(), [want])

    def test_chunks_and_shapes(self):
        gen = torch.Generator().manual_seed(2)
        s = torch.randn((2, 5, 16), generator=gen)
        whole = methods.keep_2_of_4(s)
        with mock.patch.object(methods, "_CHUNK", 16):
            self.assertTrue(torch.equal(methods.keep_2_of_4(s), whole))
        self.assertTrue(torch.equal(whole.view(10, 16), keep_loop(s.view(10, 16))))
        with self.assertRaisesRegex(ValueError, "multiple of 4"):
            methods.keep_2_of_4(torch.zeros((2, 6)))


@unittest.skipUnless(torch is not None, NEEDS)
class ScoresTest(unittest.TestCase):
    def setUp(self):
        gen = torch.Generator().manual_seed(3)
        self.w = torch.randn((12, 32), generator=gen, dtype=torch.float64)
        self.s = torch.rand((32,), generator=gen, dtype=torch.float64) * 10

    def test_wanda_definition(self):
        want = torch.zeros_like(self.w)
        for i in range(12):
            for j in range(32):
                want[i, j] = abs(float(self.w[i, j])) * float(self.s[j]) ** 0.5
        self.assertTrue(torch.allclose(methods.wanda_scores(self.w, self.s), want, rtol=1e-12, atol=0))
        self.assertTrue(torch.equal(methods.wanda(self.w, self.s), keep_loop(want)))
        self.assertTrue(torch.equal(methods.wanda(self.w, self.s), ~ref.wanda_mask(self.w, self.s)))

    def test_ria_definition(self):
        a = self.w.abs()
        want = torch.zeros_like(self.w)
        for i in range(12):
            for j in range(32):
                col = sum(float(a[r, j]) for r in range(12))
                row = sum(float(a[i, c]) for c in range(32))
                want[i, j] = (float(a[i, j]) / col + float(a[i, j]) / row) * float(self.s[j]) ** 0.25
        self.assertTrue(torch.allclose(methods.ria_scores(self.w, self.s), want, rtol=1e-12, atol=0))
        self.assertTrue(torch.equal(methods.ria(self.w, self.s), keep_loop(want)))
        self.assertTrue(torch.equal(methods.ria(self.w, self.s), ~ref.ria_mask(self.w, self.s)))

    def test_statistics_scale_does_not_matter(self):
        for f in (methods.wanda, methods.ria):
            with self.subTest(f.__name__):
                self.assertTrue(torch.equal(f(self.w, self.s), f(self.w, self.s * 7.5)))

    def test_ria_zero_sums(self):
        w = self.w.clone()
        w[:, 4] = 0  # a column of zeros
        w[3] = 0  # a row of zeros
        scores = methods.ria_scores(w, self.s)
        self.assertTrue(bool(torch.isfinite(scores).all()))
        self.assertTrue(bool((scores[:, 4] == 0).all()) and bool((scores[3] == 0).all()))
        self.assertEqual(int(methods.ria(w, self.s).sum()), 12 * 16)

    def test_bf16_weights(self):
        w = self.w.to(torch.bfloat16)
        s = self.s.float()
        self.assertEqual(methods.wanda_scores(w, s).dtype, torch.float32)
        self.assertTrue(torch.equal(methods.wanda(w, s), ~ref.wanda_mask(w, s)))
        self.assertTrue(torch.equal(methods.ria(w, s), ~ref.ria_mask(w, s)))


@unittest.skipUnless(torch is not None, NEEDS)
class SparseGPTTest(unittest.TestCase):
    def check_against_reference(self, n, k, block, dead=(), seed=0):
        gen = torch.Generator().manual_seed(seed + 10)
        w = torch.randn((n, k), generator=gen, dtype=torch.float64)
        _, h = random_hessian(k, dead=dead, seed=seed)
        want, pruned = ref.fasterprune(w, h, blocksize=block)
        got, keep = methods.sparsegpt(w, h, block=block)
        self.assertTrue(torch.equal(keep, ~pruned))
        self.assertTrue(torch.allclose(got, want, rtol=1e-9, atol=1e-12), f"max diff {float((got - want).abs().max())}")
        self.assertTrue(bool((got[~keep] == 0).all()))
        self.assertTrue(bool((keep.view(n, k // 4, 4).sum(-1) == 2).all()))
        return w, h, got, keep

    def test_against_reference(self):
        for n, k, block, dead in [(8, 16, 8, ()), (16, 200, 128, ()), (5, 64, 16, (3, 17, 40)), (12, 48, 128, (0, 1, 2, 3))]:
            with self.subTest(n=n, k=k, block=block, dead=dead):
                w, _, got, _ = self.check_against_reference(n, k, block, dead)
                for j in dead:
                    self.assertTrue(bool((got[:, j] == 0).all()), "a dead input's weights are zero")
                self.assertFalse(torch.equal(got, w), "the kept weights are updated")

    def test_arguments_untouched_unless_overwrite(self):
        gen = torch.Generator().manual_seed(4)
        w = torch.randn((4, 32), generator=gen, dtype=torch.float64)
        _, h = random_hessian(32, dead=(5,))
        w0, h0 = w.clone(), h.clone()
        a, ka = methods.sparsegpt(w, h, block=8)
        self.assertTrue(torch.equal(w, w0) and torch.equal(h, h0))
        b, kb = methods.sparsegpt(w, h, block=8, overwrite=True)
        self.assertTrue(torch.equal(a, b) and torch.equal(ka, kb))
        self.assertTrue(b is w, "overwrite works in the given weight")

    def test_rows_are_independent(self):
        gen = torch.Generator().manual_seed(5)
        w1 = torch.randn((6, 64), generator=gen, dtype=torch.float64)
        w2 = torch.randn((10, 64), generator=gen, dtype=torch.float64)
        _, h = random_hessian(64)
        q, keep = methods.sparsegpt(torch.cat([w1, w2]), h, block=16)
        q1, k1 = methods.sparsegpt(w1, h, block=16)
        q2, k2 = methods.sparsegpt(w2, h, block=16)
        self.assertTrue(torch.equal(keep, torch.cat([k1, k2])))
        self.assertTrue(torch.allclose(q, torch.cat([q1, q2]), rtol=1e-12, atol=1e-14))

    def test_hessian_scale_does_not_matter(self):
        gen = torch.Generator().manual_seed(6)
        w = torch.randn((8, 32), generator=gen, dtype=torch.float64)
        _, h = random_hessian(32)
        q, keep = methods.sparsegpt(w, h, block=8)
        q2, keep2 = methods.sparsegpt(w, h * 123.0, block=8)
        self.assertTrue(torch.equal(keep, keep2))
        self.assertTrue(torch.allclose(q, q2, rtol=1e-9, atol=1e-12))

    def test_update_lowers_the_output_error(self):
        gen = torch.Generator().manual_seed(7)
        w = torch.randn((32, 64), generator=gen, dtype=torch.float64)
        x, h = random_hessian(64, tokens=500)
        q, keep = methods.sparsegpt(w, h)
        err_update = (x @ (w - q).t()).norm()
        err_masked = (x @ (w - w * keep).t()).norm()
        self.assertLess(float(err_update), 0.9 * float(err_masked))

    def test_float32(self):
        gen = torch.Generator().manual_seed(8)
        w = torch.randn((16, 128), generator=gen)
        _, h = random_hessian(128)
        q, keep = methods.sparsegpt(w.to(torch.bfloat16), h.float())
        self.assertEqual(q.dtype, torch.float32)
        want, pruned = ref.fasterprune(w.to(torch.bfloat16), h.float())
        self.assertGreater(float((keep == ~pruned).float().mean()), 0.99)
        self.assertTrue(torch.allclose(q, want, rtol=1e-3, atol=1e-4))

    def test_refusals(self):
        w = torch.ones((4, 8), dtype=torch.float64)
        with self.assertRaisesRegex(CalibrationError, r"^L: the Hessian is not positive definite"):
            methods.sparsegpt(w, -torch.eye(8, dtype=torch.float64), where="L")
        bad = w.clone()
        bad[1, 2] = float("inf")
        with self.assertRaisesRegex(CalibrationError, "L: the SparseGPT update is not finite"):
            methods.sparsegpt(bad, torch.eye(8, dtype=torch.float64), where="L")
        with self.assertRaisesRegex(ValueError, "multiples of 4"):
            methods.sparsegpt(torch.ones((4, 6)), torch.eye(6))


def pack_loop(keep):
    rows, k = keep.shape
    out = torch.zeros((rows, (k + 7) // 8), dtype=torch.uint8)
    for r in range(rows):
        for c in range(k):
            if keep[r, c]:
                out[r, c // 8] |= 1 << (c % 8)
    return out


@unittest.skipUnless(torch is not None, NEEDS)
class MaskLayoutTest(unittest.TestCase):
    def test_pack(self):
        gen = torch.Generator().manual_seed(9)
        for k in (4, 8, 12, 20, 64):
            with self.subTest(k=k):
                keep = methods.keep_2_of_4(torch.randn((5, k), generator=gen))
                packed = output.pack_mask(keep)
                self.assertEqual(packed.dtype, torch.uint8)
                self.assertEqual(tuple(packed.shape), output.mask_shape((5, k)))
                self.assertTrue(torch.equal(packed, pack_loop(keep)))
                self.assertTrue(torch.equal(output.unpack_mask(packed, k), keep))
        self.assertEqual(output.pack_mask(torch.tensor([[True, False, False, True, False, True, True, False]])).tolist(), [[0b01101001]])
        self.assertEqual(output.pack_mask(torch.tensor([[False, True, True, False]])).tolist(), [[0b0110]])


def read_decisions(path):
    """The tensors of a decisions file as torch tensors, read with the
    standard library and torch.frombuffer, and its metadata."""
    doc = output.read_metadata(path)
    dtypes = {"U8": torch.uint8, "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        data = f.read()[n:]
    out = {}
    for name, e in doc["tensors"].items():
        b, end = e["data_offsets"]
        raw = bytearray(data[b:end])
        out[name] = torch.frombuffer(raw, dtype=dtypes[e["dtype"]]).reshape(e["shape"]) if raw else torch.zeros(e["shape"])
    return doc, out


@unittest.skipUnless(torch is not None, NEEDS)
class WriterTest(unittest.TestCase):
    def test_round_trip(self):
        gen = torch.Generator().manual_seed(10)
        entries = [output.Entry("model.layers.0.mlp.up_proj.weight", "BF16", (6, 12)), output.Entry("model.layers.0.mlp.down_proj.weight", "F32", (3, 8))]
        keeps = {e.name: methods.keep_2_of_4(torch.randn(e.shape, generator=gen)) for e in entries}
        updates = {
            entries[0].name: (torch.randn((6, 12), generator=gen) * keeps[entries[0].name]).to(torch.bfloat16),
            entries[1].name: torch.randn((3, 8), generator=gen) * keeps[entries[1].name],
        }
        meta = output.metadata("sparsegpt", "m", {"file": "t.txt", "sha256": "0" * 64, "kind": "plain"}, 4, 16, 0)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.decisions.safetensors")
            with output.open_writer(path, meta, entries, updates=True) as w:
                for e in reversed(entries):
                    output.write_tensor(w, output.update_name(e.name), updates[e.name])
                    output.write_tensor(w, output.mask_name(e.name), output.pack_mask(keeps[e.name]))
                w.commit()
            self.assertEqual(os.listdir(d), ["x.decisions.safetensors"])
            doc, tensors = read_decisions(path)
        self.assertEqual(doc["decisions"], meta)
        for e in entries:
            self.assertTrue(torch.equal(output.unpack_mask(tensors[output.mask_name(e.name)], e.shape[1]), keeps[e.name]))
            self.assertTrue(torch.equal(tensors[output.update_name(e.name)], updates[e.name]))

    def test_failure_leaves_nothing(self):
        entries = [output.Entry("a.weight", "BF16", (2, 8))]
        meta = output.metadata("wanda", "m", {}, 1, 2, 0)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x")
            with self.assertRaisesRegex(ValueError, "1 tensors never written, the first a.weight.mask"):
                with output.open_writer(path, meta, entries, updates=False) as w:
                    w.commit()
            self.assertEqual(os.listdir(d), [])
            with self.assertRaisesRegex(ValueError, "a.weight.mask: 3 bytes, want 2"):
                with output.open_writer(path, meta, entries, updates=False) as w:
                    w.write("a.weight.mask", b"abc")
            self.assertEqual(os.listdir(d), [])


class ToyBlock(nn.Module if torch is not None else object):
    """A decoder-layer-shaped block: q, k, v read one normalized input,
    gate, up another; the projections are named as in LLaMA."""

    def __init__(self, hidden=16, kv=8, inter=32, gen=None, share=True):
        super().__init__()
        self.share = share
        self.self_attn = nn.Module()
        self.mlp = nn.Module()
        for parent, name, i, o in [("self_attn", "q_proj", hidden, hidden), ("self_attn", "k_proj", hidden, kv), ("self_attn", "v_proj", hidden, kv),
                                   ("self_attn", "o_proj", hidden, hidden), ("mlp", "gate_proj", hidden, inter), ("mlp", "up_proj", hidden, inter),
                                   ("mlp", "down_proj", inter, hidden)]:
            lin = nn.Linear(i, o, bias=name == "q_proj", dtype=torch.float64)
            with torch.no_grad():
                lin.weight.copy_(torch.randn((o, i), generator=gen, dtype=torch.float64) / i**0.5)
                if lin.bias is not None:
                    lin.bias.copy_(torch.randn((o,), generator=gen, dtype=torch.float64) * 0.1)
            setattr(getattr(self, parent), name, lin)

    @staticmethod
    def norm(x):
        return x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()

    def forward(self, x, **kwargs):
        a = self.self_attn
        h = self.norm(x)
        q, k, v = a.q_proj(h), a.k_proj(h if self.share else h * 2), a.v_proj(h)
        x = x + a.o_proj(torch.tanh(q) * k.repeat(1, 1, 2) + v.repeat(1, 1, 2))
        m = self.mlp
        h = self.norm(x)
        return x + m.down_proj(nn.functional.silu(m.gate_proj(h)) * m.up_proj(h))


class ToyLM(nn.Module if torch is not None else object):
    """The parts of a transformers causal LM the reference reads."""

    def __init__(self, layers=3, vocab=50, seed=0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.config = types.SimpleNamespace(use_cache=False)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, 16, dtype=torch.float64)
        with torch.no_grad():
            self.model.embed_tokens.weight.copy_(torch.randn((vocab, 16), generator=gen, dtype=torch.float64))
        self.model.layers = nn.ModuleList([ToyBlock(gen=gen) for _ in range(layers)])

    def forward(self, ids, use_cache=False):
        h = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            h = layer(h, position_embeddings=None)
        return types.SimpleNamespace(logits=h)


class ToyLayers:
    """stream.Layers over copies of a ToyLM's layers."""

    def __init__(self, lm):
        import copy

        self.layers = copy.deepcopy(lm.model.layers)
        self.loaded, self.released = [], []

    def layer(self, i):
        self.loaded.append(i)
        return self.layers[i]

    def release(self, i):
        self.released.append(i)

    def forward(self, layer, x):
        return layer(x)


def toy_targets(lm, dtype="F32"):
    out = []
    for i, layer in enumerate(lm.model.layers):
        ts = []
        for name, m in layer.named_modules():
            if isinstance(m, nn.Linear):
                ts.append(Target(f"model.layers.{i}.{name}.weight", dtype, tuple(m.weight.shape), i, name))
        out.append(sorted(ts, key=lambda t: t.name))
    return out


@unittest.skipUnless(torch is not None, NEEDS)
class StreamTest(unittest.TestCase):
    def setUp(self):
        self.lm = ToyLM()
        gen = torch.Generator().manual_seed(11)
        self.ids = torch.randint(0, 50, (5, 12), generator=gen)

    def run_ours(self, method, batch=2, lm=None):
        lm = lm or self.lm
        layers = ToyLayers(lm)
        got = {}

        def emit(t, keep, update):
            self.assertNotIn(t.name, got)
            got[t.name] = (keep.clone(), None if update is None else update.clone())

        with torch.no_grad():
            hidden = lm.model.embed_tokens(self.ids)
        stream.prune_layers(layers, hidden, toy_targets(lm), method, emit, batch)
        return layers, got

    def test_against_reference(self):
        for method in ("wanda", "ria", "sparsegpt"):
            with self.subTest(method=method):
                layers, got = self.run_ours(method)
                lm = ToyLM()
                want = ref.calibrate(lm, self.ids, method)
                self.assertEqual(sorted(got), sorted(want))
                self.assertEqual(layers.loaded, [0, 1, 2])
                self.assertEqual(layers.released, [0, 1, 2])
                for name, (keep, update) in got.items():
                    self.assertTrue(torch.equal(keep, want[name]["keep"]), name)
                    mine = layers.layers.get_parameter(name[len("model.layers.") :])
                    self.assertTrue(torch.allclose(mine, want[name]["weight"], rtol=1e-9, atol=1e-12), name)
                    if method == "sparsegpt":
                        self.assertEqual(update.dtype, torch.float32)
                        self.assertTrue(torch.equal(update, mine.float()))
                    else:
                        self.assertIsNone(update)
                        orig = self.lm.get_parameter(name)
                        self.assertTrue(torch.equal(mine, orig * keep))

    def test_batching_does_not_matter(self):
        _, a = self.run_ours("sparsegpt", batch=1)
        _, b = self.run_ours("sparsegpt", batch=5)
        for name in a:
            self.assertTrue(torch.equal(a[name][0], b[name][0]))
            self.assertTrue(torch.allclose(a[name][1], b[name][1], rtol=1e-5, atol=1e-7))

    def test_layers_feed_pruned_outputs(self):
        # Layer 1's statistics come from the pruned layer 0: a run that
        # skips pruning layer 0 decides layer 1 differently.
        layers = ToyLayers(self.lm)
        targets = toy_targets(self.lm)
        got = {}
        with torch.no_grad():
            hidden = self.lm.model.embed_tokens(self.ids)
        stream.prune_layers(layers, hidden.clone(), [[]] + targets[1:], "wanda", lambda t, k, u: got.setdefault(t.name, k), 2)
        _, full = self.run_ours("wanda")
        differs = [n for n in got if not torch.equal(got[n], full[n][0])]
        self.assertTrue(differs)

    def test_shared_inputs_checked(self):
        lm = ToyLM()
        for layer in lm.model.layers:
            layer.share = False
        with self.assertRaisesRegex(CalibrationError, r"layer 0\.self_attn\.(k|q|v)_proj: .* distinct ones in its group self_attn\.qkv"):
            self.run_ours("wanda", lm=lm)

    def test_release_on_failure(self):
        layers = ToyLayers(self.lm)
        targets = toy_targets(self.lm)
        bad = [Target(targets[0][0].name, "F32", targets[0][0].shape, 0, "self_attn.nope")]
        with torch.no_grad():
            hidden = self.lm.model.embed_tokens(self.ids)
        with self.assertRaises(AttributeError):
            stream.prune_layers(layers, hidden, [bad], "wanda", lambda *a: None, 2)
        self.assertEqual(layers.released, [0])

    def test_input_keys(self):
        for module, want in [("self_attn.q_proj", "self_attn.qkv"), ("self_attn.v_proj", "self_attn.qkv"), ("self_attn.o_proj", "self_attn.o_proj"),
                             ("mlp.gate_proj", "mlp.gate_up"), ("mlp.up_proj", "mlp.gate_up"), ("mlp.down_proj", "mlp.down_proj"), ("q_proj", "qkv")]:
            self.assertEqual(stream.input_key(module), want)

    def test_statistics(self):
        gen = torch.Generator().manual_seed(12)
        x = torch.randn((7, 6), generator=gen)
        self.assertTrue(torch.allclose(stream.sum_of_squares(x), (x.double() ** 2).sum(0).float(), rtol=1e-6))
        self.assertTrue(torch.allclose(stream.gram(x), (x.double().t() @ x.double()).float(), rtol=1e-5, atol=1e-6))
        self.assertEqual(stream.gram(x.to(torch.bfloat16)).dtype, torch.float32)
        self.assertEqual(stream.sum_of_squares(x.double()).dtype, torch.float64)


if __name__ == "__main__":
    unittest.main()
