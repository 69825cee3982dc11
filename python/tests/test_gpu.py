"""The kernels through PyTorch on a GPU: the op against torch.mm on the
dense pruned weight, graph capture, torch.compile, and transformers loading
an ampere checkpoint. Skipped without torch and a CUDA GPU (CI has
neither); the GPU host runs them (docs/serve.md)."""

import json
import os
import subprocess
import unittest

from fixtures import TINY, pruned, sfsurgery_bin

try:
    import torch
except ImportError:
    torch = None

GPU = torch is not None and torch.cuda.is_available()

# Llama-3 8B and 70B projection shapes (n, k), alone and stacked as the
# package runs them: q/o, k/v, qkv, gate or up, gate_up, down.
SHAPES = [(4096, 4096), (1024, 4096), (6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336),
          (8192, 8192), (1024, 8192), (10240, 8192), (28672, 8192), (57344, 8192), (8192, 28672)]
MS = list(range(1, 65)) + [65, 128, 300, 1000]
HOPPER = GPU and torch.cuda.get_device_capability() == (9, 0)


def plan(shapes, dtype):
    """The launch records of `sfsurgery plan` for shapes on this GPU."""
    from sfsurgery import records

    s = ",".join(f"{n}x{k}" for n, k in shapes)
    out = subprocess.run([sfsurgery_bin(), "plan", "--shapes", s, "--dtype", dtype, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return records.parse(json.loads(out))


def sparse_weight(n, k, dtype, gen):
    """A random 2:4 weight: dense pruned W, and its packed + meta as
    PyTorch's CUTLASS conversion writes them."""
    from torch.sparse._semi_structured_conversions import sparse_semi_structured_from_dense_cutlass

    w = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    g = w.view(n, k // 4, 4)
    keep = g.abs().float().topk(2, dim=-1).indices
    mask = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, keep, True)
    w = (g * mask).view(n, k)
    packed, meta = sparse_semi_structured_from_dense_cutlass(w)
    return w, packed.contiguous(), meta.contiguous()


@unittest.skipUnless(GPU, "needs torch and a CUDA GPU")
class OpTest(unittest.TestCase):
    """torch.ops.sfsurgery.linear against torch.mm on the dense pruned
    weight, for every Llama-3 shape, M = 1…64 and a few larger (those go
    through SparseLinear's prefill path: on an H100 or H200 our prefill
    kernel), BF16 and F16, with and without bias."""

    def test_shapes(self):
        from sfsurgery import SparseLinear, ops

        gen = torch.Generator(device="cuda").manual_seed(1)
        for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
            table = plan(SHAPES, name)
            if HOPPER:  # the narrow shapes' prefill at 65…128 tokens splits k
                self.assertTrue(any(pf.splits > 1 for ranges in table.prefill.values() for pf in ranges))
            for n, k in SHAPES:
                w, packed, meta = sparse_weight(n, k, dtype, gen)
                dec = ops.decode(packed, meta)
                self.assertTrue(torch.equal(dec, w), f"decode {n}x{k} {name}")
                wt = w.float().t()
                for bias in (False, True):
                    lin = SparseLinear(k, n, bias=bias, dtype=dtype, device="cuda")
                    with torch.no_grad():
                        lin.packed.copy_(packed)
                        lin.meta.copy_(meta)
                        if bias:
                            lin.bias.copy_(torch.randn(n, generator=gen, device="cuda").to(dtype))
                    lin.attach(table)
                    self.assertEqual(lin.prefill, "ours" if HOPPER else "decode")
                    for m in MS:
                        x = torch.randn((m, k), generator=gen, device="cuda").to(dtype)
                        with torch.no_grad():
                            y = lin(x)
                        ref = x.float() @ wt
                        if bias:
                            ref += lin.bias.float()
                        self.assertEqual(y.dtype, dtype)
                        err = (y.float() - ref).abs().max().item() / ref.abs().max().item()
                        self.assertLess(err, 1e-2, f"{n}x{k} {name} m={m} bias={bias}: rel. error {err}")
                del w, wt, packed, meta, dec
                torch.cuda.empty_cache()

    def test_no_fallback_needed(self):
        """On a whole GPU every planned cooperative or clustered launch fits:
        the occupancy check that picks fallbacks before capture picks none."""
        from sfsurgery import driver, ops

        table = plan(SHAPES, "bf16")
        ops.register(table, torch.device("cuda"))
        k = driver.kernels(torch.cuda.current_device())
        special = [r for per_m in table.launches.values() for r in per_m.values() if r.fallback is not None]
        self.assertTrue(special, "no cooperative or clustered record planned: the test proves nothing")
        for r in special:
            self.assertIs(k.chosen(r), r, f"{r.entry} {r.grid}: fallback chosen")

    def test_cusparselt_prefill(self):
        """SparseLinear's cuSPARSELt prefill against the dense product, at
        token counts that are and are not multiples of 8."""
        from sfsurgery import SparseLinear

        gen = torch.Generator(device="cuda").manual_seed(5)
        n, k = 4096, 4096
        w, packed, meta = sparse_weight(n, k, torch.bfloat16, gen)
        lin = SparseLinear(k, n, bias=True, device="cuda")
        with torch.no_grad():
            lin.packed.copy_(packed)
            lin.meta.copy_(meta)
            lin.bias.normal_()
        lin.attach(plan([(n, k)], "bf16"), prefill="cusparselt")
        for m in (65, 128, 300):
            x = torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
            with torch.no_grad():
                y = lin(x)
            ref = x.float() @ w.float().t() + lin.bias.float()
            self.assertEqual(tuple(y.shape), (m, n))
            err = (y.float() - ref).abs().max().item() / ref.abs().max().item()
            self.assertLess(err, 1e-2, f"m={m}: rel. error {err}")

    def test_decode_prefill(self):
        """SparseLinear's decode prefill (the weight decoded to dense, then
        torch's matmul) against the dense product."""
        from sfsurgery import SparseLinear

        gen = torch.Generator(device="cuda").manual_seed(6)
        n, k = 1024, 4096
        w, packed, meta = sparse_weight(n, k, torch.float16, gen)
        lin = SparseLinear(k, n, bias=True, dtype=torch.float16, device="cuda")
        with torch.no_grad():
            lin.packed.copy_(packed)
            lin.meta.copy_(meta)
            lin.bias.normal_()
        lin.attach(plan([(n, k)], "f16"), prefill="decode")
        for m in (65, 300):
            x = torch.randn((m, k), generator=gen, device="cuda").to(torch.float16)
            with torch.no_grad():
                y = lin(x)
            ref = x.float() @ w.float().t() + lin.bias.float()
            err = (y.float() - ref).abs().max().item() / ref.abs().max().item()
            self.assertLess(err, 1e-2, f"m={m}: rel. error {err}")

    @unittest.skipUnless(HOPPER, "the prefill kernel's records are planned for sm_90a")
    def test_records_with_a_gap(self):
        """Records with decode records up to 16 tokens only (a policy's gap)
        and prefill records: 17…64 tokens take the decode path, 65 and up
        the prefill kernel, all against the dense product."""
        from sfsurgery import SparseLinear

        gen = torch.Generator(device="cuda").manual_seed(7)
        n, k = 2048, 2048
        w, packed, meta = sparse_weight(n, k, torch.bfloat16, gen)
        table = plan([(n, k)], "bf16")
        table.launches[(n, k)] = {m: r for m, r in table.launches[(n, k)].items() if m <= 16}
        lin = SparseLinear(k, n, device="cuda")
        with torch.no_grad():
            lin.packed.copy_(packed)
            lin.meta.copy_(meta)
        lin.attach(table)
        self.assertEqual((lin.prefill, lin.max_tokens), ("ours", 16))
        for m in (16, 17, 64, 65, 300):
            x = torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
            with torch.no_grad():
                y = lin(x)
            ref = x.float() @ w.float().t()
            err = (y.float() - ref).abs().max().item() / ref.abs().max().item()
            self.assertLess(err, 1e-2, f"m={m}: rel. error {err}")

    def test_refusals(self):
        from sfsurgery import SparseLinear, ops
        from sfsurgery.errors import CheckpointError, DeviceError, RecordError

        table = plan([(4096, 4096)], "bf16")
        gen = torch.Generator(device="cuda").manual_seed(2)
        _, packed, meta = sparse_weight(4096, 4096, torch.bfloat16, gen)
        tid = ops.register(table, torch.device("cuda"))
        x = torch.randn((4, 4096), device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(RecordError, "activations of torch.float32"):
            ops.linear(x.float(), packed, meta, None, tid)
        with self.assertRaisesRegex(RecordError, "activations of 2048 features"):
            ops.linear(x[:, :2048], packed, meta, None, tid)
        with self.assertRaisesRegex(RecordError, "^sfsurgery.linear: activations of 0 features for a 4096x4096 weight$"):
            ops.linear(x[0, 0], packed, meta, None, tid)
        with self.assertRaisesRegex(CheckpointError, "^sfsurgery.linear: a 4096x0 weight; the kernels need n and k above 0"):
            ops.linear(x[:, :0], packed[:, :0].contiguous(), meta[:0], None, tid)
        # The op's shapes: no tokens, one 1-D token, leading dimensions,
        # a strided x (copied) all give what the 2-D launch of as many
        # tokens gives.
        self.assertEqual(tuple(ops.linear(x[:0], packed, meta, None, tid).shape), (0, 4096))
        self.assertEqual(tuple(ops.linear(x[:0].reshape(2, 0, 4096), packed, meta, None, tid).shape), (2, 0, 4096))
        want = ops.linear(x, packed, meta, None, tid)
        self.assertTrue(torch.equal(ops.linear(x[1], packed, meta, None, tid), ops.linear(x[1:2], packed, meta, None, tid)[0]))
        self.assertTrue(torch.equal(ops.linear(x.reshape(2, 2, 4096), packed, meta, None, tid), want.reshape(2, 2, 4096)))
        wide = torch.zeros((4, 8192), device="cuda", dtype=torch.bfloat16)
        wide[:, :4096] = x
        self.assertTrue(torch.equal(ops.linear(wide[:, :4096], packed, meta, None, tid), want))
        if torch.cuda.device_count() > 1:
            with self.assertRaisesRegex(DeviceError, "^sfsurgery.linear: packed on cuda:0, want cuda:1$"):
                ops.linear(x.to("cuda:1"), packed, meta, None, tid)
        x65 = torch.zeros((65, 4096), device="cuda", dtype=torch.bfloat16)
        if HOPPER:  # the prefill kernel's records serve m = 65
            self.assertEqual(tuple(ops.linear(x65, packed, meta, None, tid).shape), (65, 4096))
        bare = plan([(4096, 4096)], "bf16")
        bare.prefill.clear()
        with self.assertRaisesRegex(RecordError, "no launch record for 4096x4096 at m = 65"):
            ops.linear(x65, packed, meta, None, ops.register(bare, torch.device("cuda")))
        lin = SparseLinear(4096, 4096, dtype=torch.float16, device="cuda")
        with self.assertRaisesRegex(RecordError, "launch records for bf16, the weight is torch.float16"):
            lin.attach(table)


@unittest.skipUnless(GPU, "needs torch and a CUDA GPU")
class CaptureTest(unittest.TestCase):
    """CUDA graphs and torch.compile capture the op: replays give the
    eager results, bit for bit."""

    def setUp(self):
        from sfsurgery import SparseLinear

        gen = torch.Generator(device="cuda").manual_seed(3)
        self.n, self.k = 14336, 4096
        _, packed, meta = sparse_weight(self.n, self.k, torch.bfloat16, gen)
        self.lin = SparseLinear(self.k, self.n, bias=True, device="cuda")
        with torch.no_grad():
            self.lin.packed.copy_(packed)
            self.lin.meta.copy_(meta)
            self.lin.bias.normal_()
        self.lin.attach(plan([(self.n, self.k)], "bf16"))

    def test_graph(self):
        for m in (1, 16, 64):
            x = torch.randn((m, self.k), device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                want = self.lin(x)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    self.lin(x)  # warm up on the capture stream
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = self.lin(x)
                for _ in range(3):
                    g.replay()
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(y, want), f"m={m}: graph replay differs")

    def test_compile(self):
        f = torch.compile(self.lin, mode="reduce-overhead", fullgraph=True)
        for m in (1, 8, 300):
            x = torch.randn((m, self.k), device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                want = self.lin(x)
                for _ in range(3):
                    y = f(x)
            if m <= 64 or self.lin.prefill == "ours":  # our op, opaque to the compiler: the same launch
                self.assertTrue(torch.equal(y, want), f"m={m}: compiled differs")
            else:  # prefill through torch's matmul, which the compiler may pick otherwise
                err = ((y.float() - want.float()).norm() / want.float().norm()).item()
                self.assertLess(err, 1e-2, f"m={m}: compiled differs, rel. error {err}")


@unittest.skipUnless(GPU, "needs torch and a CUDA GPU")
class TransformersTest(unittest.TestCase):
    """from_pretrained on the pruned tiny checkpoint: logits against the
    dense output of the same prune, and the same greedy tokens."""

    def test_from_pretrained(self):
        import sfsurgery  # noqa: F401  (registers the quantizer)
        from sfsurgery import SparseLinear, SparseMLP
        from transformers import AutoModelForCausalLM

        os.environ["SFSURGERY_BIN"] = sfsurgery_bin()
        sparse = AutoModelForCausalLM.from_pretrained(pruned(), device_map="cuda")
        dense = AutoModelForCausalLM.from_pretrained(pruned(fmt="dense"), device_map="cuda", dtype=torch.bfloat16)
        lin = [m for m in sparse.modules() if isinstance(m, SparseLinear)]
        mlps = [m for m in sparse.modules() if isinstance(m, SparseMLP)]
        self.assertEqual((len(lin), len(mlps)), (4 * 4, 4))  # qkv, o, gate_up, down
        ids = torch.randint(3, 512, (2, 40), device="cuda", generator=torch.Generator(device="cuda").manual_seed(4))
        with torch.no_grad():
            a = sparse(ids).logits.float()
            b = dense(ids).logits.float()
        err = ((a - b).norm() / b.norm()).item()
        self.assertLess(err, 1e-2, f"logits rel. error {err}")
        g1 = sparse.generate(ids[:1, :8], max_new_tokens=32, do_sample=False)
        g2 = dense.generate(ids[:1, :8], max_new_tokens=32, do_sample=False)
        self.assertTrue(torch.equal(g1, g2), f"greedy tokens differ:\n{g1}\n{g2}")

    def test_dense_checkpoint_untouched(self):
        import sfsurgery  # noqa: F401
        from sfsurgery import SparseLinear
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(TINY, device_map="cuda")
        self.assertFalse(any(isinstance(x, SparseLinear) for x in m.modules()))


@unittest.skipUnless(GPU, "needs torch and a CUDA GPU")
class DirectTest(unittest.TestCase):
    """SparseLinear's eager forward, which launches the weight's prepared
    launch without the dispatcher: the op's bits for every token count
    the kernels serve, each weight its own operands, x anywhere, CUDA
    graphs and torch.compile, and the op's one-line errors for an
    activation it does not take as it is."""

    MS = (1, 2, 7, 16, 64, 65, 128, 512)
    # A decode-sized and a larger (MLP) projection of Llama-3 8B.
    SHAPES = ((1024, 4096), (14336, 4096))

    @classmethod
    def setUpClass(cls):
        cls.table = plan(cls.SHAPES, "bf16")
        cls.gen = torch.Generator(device="cuda").manual_seed(11)

    def linear(self, n, k, bias=False, table=None):
        from sfsurgery import SparseLinear

        w, packed, meta = sparse_weight(n, k, torch.bfloat16, self.gen)
        lin = SparseLinear(k, n, bias=bias, device="cuda")
        with torch.no_grad():
            lin.packed.copy_(packed)
            lin.meta.copy_(meta)
            if bias:
                lin.bias.copy_(torch.randn(n, generator=self.gen, device="cuda").to(torch.bfloat16))
        lin.attach(table or self.table)
        return w, lin

    def ours(self, lin, m):
        """Whether SparseLinear runs our kernels at m (else "decode"
        prefill: the weight decoded, then torch's matmul)."""
        return m <= lin.max_tokens or lin.prefill == "ours"

    def op(self, lin, x):
        from sfsurgery import ops

        return ops.linear(x, lin.packed, lin.meta, lin.bias, lin.table_id)

    def x(self, m, k, lead=(1,)):
        return torch.randn((*lead, m, k), generator=self.gen, device="cuda").to(torch.bfloat16)

    def test_bits_of_the_op(self):
        for n, k in self.SHAPES:
            for bias in (False, True):
                w, lin = self.linear(n, k, bias)
                for m in self.MS:
                    if not self.ours(lin, m):
                        continue
                    with self.subTest(n=n, k=k, bias=bias, m=m), torch.no_grad():
                        x = self.x(m, k)
                        y = lin(x)
                        want = self.op(lin, x)
                        self.assertEqual(tuple(y.shape), (1, m, n))
                        self.assertTrue(torch.equal(y, want), "direct launch differs from the op's")
                        ref = x.float() @ w.float().t() + (lin.bias.float() if bias else 0)
                        err = (y.float() - ref).abs().max().item() / ref.abs().max().item()
                        self.assertLess(err, 1e-2)
                with torch.inference_mode():
                    x = self.x(7, k)
                    self.assertTrue(torch.equal(lin(x), self.op(lin, x)), "under inference_mode")

    def test_no_dispatcher(self):
        """In eager mode the forward does not call the op: the profiler
        records the direct launch and no sfsurgery::linear."""
        from torch.profiler import profile

        from sfsurgery.linear import DIRECT

        _, lin = self.linear(*self.SHAPES[0])
        for m in (1, 128 if HOPPER else 16):
            x = self.x(m, lin.in_features)
            with torch.no_grad(), profile() as prof:
                lin(x)
            keys = {e.key for e in prof.key_averages()}
            self.assertIn(DIRECT, keys)
            self.assertNotIn("sfsurgery::linear", keys)

    def test_recorded_forward_runs_the_op(self):
        """A forward autograd records (grad enabled, x requires grad) runs
        the op, whose output autograd knows of; the same bits."""
        from torch.profiler import profile

        from sfsurgery.linear import DIRECT

        _, lin = self.linear(*self.SHAPES[0])
        x = self.x(1, lin.in_features).requires_grad_()
        with profile() as prof:
            y = lin(x)
        keys = {e.key for e in prof.key_averages()}
        self.assertIn("sfsurgery::linear", keys)
        self.assertNotIn(DIRECT, keys)
        with torch.no_grad():
            self.assertTrue(torch.equal(y.detach(), self.op(lin, x.detach())))

    def test_moved_buffers_are_freed(self):
        """After .cpu() the GPU copies of packed and meta are freed: the
        prepared launches do not keep them."""
        import gc

        _, lin = self.linear(*self.SHAPES[1])
        with torch.no_grad():
            lin(self.x(1, lin.in_features))
        torch.cuda.synchronize()
        nbytes = lin.packed.numel() * lin.packed.element_size() + lin.meta.numel() * lin.meta.element_size()
        before = torch.cuda.memory_allocated()
        lin.cpu()
        gc.collect()
        self.assertGreaterEqual(before - torch.cuda.memory_allocated(), nbytes)

    def test_weights_apart(self):
        """Two modules of one shape on one table, called in turn at the same
        m: each gets its own weight and bias."""
        n, k = self.SHAPES[0]
        wa, a = self.linear(n, k, bias=True)
        wb, b = self.linear(n, k, bias=True)
        for m in (1, 16, 128 if HOPPER else 64):
            x = self.x(m, k)
            with torch.no_grad():
                ys = [a(x), b(x), a(x), b(x)]
                self.assertTrue(torch.equal(ys[0], self.op(a, x)))
                self.assertTrue(torch.equal(ys[1], self.op(b, x)))
            self.assertTrue(torch.equal(ys[0], ys[2]) and torch.equal(ys[1], ys[3]))
            self.assertFalse(torch.equal(ys[0], ys[1]), f"m={m}: two weights, one result")
            for y, w, lin in ((ys[0], wa, a), (ys[1], wb, b)):
                ref = x.float() @ w.float().t() + lin.bias.float()
                self.assertLess((y.float() - ref).abs().max().item() / ref.abs().max().item(), 1e-2, f"m={m}")

    def test_x_anywhere(self):
        """Consecutive calls with x at other addresses (the prefill kernel's
        x map encoded again), and back at the first one."""
        n, k = self.SHAPES[1]
        w, lin = self.linear(n, k)
        for m in (16, 128, 512):
            if not self.ours(lin, m):
                continue
            big = torch.randn((4, m, k), generator=self.gen, device="cuda").to(torch.bfloat16)
            order = [0, 1, 1, 2, 0, 3, 0]
            with torch.no_grad():
                ys = [lin(big[i]) for i in order]
                for i, y in zip(order, ys):
                    self.assertTrue(torch.equal(y, self.op(lin, big[i].clone())), f"m={m} x {i}")
                # another m at the same address
                self.assertTrue(torch.equal(lin(big[0, : m - 1]), self.op(lin, big[0, : m - 1].clone())), f"m={m - 1}")

    def test_graph(self):
        """A CUDA graph captured around the direct launch replays it on the
        captured x's address: new contents, new results."""
        n, k = self.SHAPES[1]
        _, lin = self.linear(n, k, bias=True)
        for m in (1, 16, 64) + ((128, 512) if HOPPER else ()):
            x = self.x(m, k)
            with torch.no_grad():
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    lin(x)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    y = lin(x)
                for _ in range(2):
                    x.copy_(self.x(m, k))
                    g.replay()
                    torch.cuda.synchronize()
                    self.assertTrue(torch.equal(y, self.op(lin, x)), f"m={m}: replay differs")

    def test_compile(self):
        """torch.compile(fullgraph=True) of a module around SparseLinear
        traces the op (one graph) and computes its bits."""
        n, k = self.SHAPES[0]
        _, lin = self.linear(n, k, bias=True)

        class Around(torch.nn.Module):
            def __init__(self, lin):
                super().__init__()
                self.lin = lin

            def forward(self, x):
                return self.lin(x * 2) + 1

        mod = Around(lin)
        f = torch.compile(mod, fullgraph=True)
        for m in (1, 8) + ((300,) if HOPPER else ()):
            x = self.x(m, k)
            with torch.no_grad():
                want = self.op(lin, x * 2) + 1
                for _ in range(2):
                    self.assertTrue(torch.equal(f(x), want), f"m={m}: compiled differs")
                self.assertTrue(torch.equal(mod(x), want), f"m={m}: eager differs")

    def test_refusals(self):
        """An activation the direct launch does not take goes to the op:
        refused in one line, or copied and computed."""
        from sfsurgery.errors import DeviceError, RecordError

        n, k = self.SHAPES[0]
        _, lin = self.linear(n, k)
        x = self.x(4, k)
        cases = [
            (x.float(), RecordError, "activations of torch.float32, weight of torch.bfloat16, launch records for bf16"),
            (x.half(), RecordError, "activations of torch.float16"),
            (x[..., : k // 2], RecordError, f"activations of {k // 2} features for a {n}x{k} weight"),
            (x.cpu(), DeviceError, "activations on cpu, want a CUDA device"),
        ]
        for bad, err, msg in cases:
            with self.subTest(msg=msg), torch.no_grad():
                with self.assertRaises(err) as cm:
                    lin(bad)
                self.assertIn(msg, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))
        with torch.no_grad():
            wide = self.x(4, 2 * k)
            strided = wide[..., :k]  # not contiguous: the op copies it
            self.assertTrue(torch.equal(lin(strided), self.op(lin, strided.contiguous())))
            flat = torch.empty(4 * k + 8, device="cuda", dtype=torch.bfloat16)
            odd = flat[1 : 1 + 4 * k].view(4, k)  # 2 bytes off 16-byte alignment
            odd.copy_(x[0])
            self.assertTrue(torch.equal(lin(odd), self.op(lin, x[0].clone())))

    def test_buffers_change(self):
        """A buffer written in place, replaced, or copied with the module:
        the launch follows; one the op refuses is refused the same way."""
        import copy

        from sfsurgery.errors import RecordError

        n, k = self.SHAPES[0]
        _, lin = self.linear(n, k, bias=True)
        w2, packed2, meta2 = sparse_weight(n, k, torch.bfloat16, self.gen)
        x = self.x(3, k)
        with torch.no_grad():
            before = lin(x)
            lin.packed.copy_(packed2)
            lin.meta.copy_(meta2)
            inplace = lin(x)
            self.assertFalse(torch.equal(before, inplace))
            self.assertTrue(torch.equal(inplace, self.op(lin, x)))
            lin.packed = packed2.clone()
            lin.meta = meta2.clone()
            lin.bias = lin.bias * 2
            self.assertTrue(torch.equal(lin(x), self.op(lin, x)))
            dup = copy.deepcopy(lin)
            self.assertTrue(torch.equal(dup(x), lin(x)))
            lin.bias = lin.bias.float()
            with self.assertRaisesRegex(RecordError, "^sfsurgery.linear: bias torch.float32"):
                lin(x)


if __name__ == "__main__":
    unittest.main()
