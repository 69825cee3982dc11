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
        from sfsurgery.errors import RecordError

        table = plan([(4096, 4096)], "bf16")
        gen = torch.Generator(device="cuda").manual_seed(2)
        _, packed, meta = sparse_weight(4096, 4096, torch.bfloat16, gen)
        tid = ops.register(table, torch.device("cuda"))
        x = torch.randn((4, 4096), device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(RecordError, "activations of torch.float32"):
            ops.linear(x.float(), packed, meta, None, tid)
        with self.assertRaisesRegex(RecordError, "activations of 2048 features"):
            ops.linear(x[:, :2048], packed, meta, None, tid)
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


if __name__ == "__main__":
    unittest.main()
