"""bench/op_host.py's parts that need neither torch nor a GPU: its
arguments, the ratios, the table and the JSON file."""

import contextlib
import importlib.util
import io
import json
import os
import tempfile
import unittest

from fixtures import REPO

_spec = importlib.util.spec_from_file_location("op_host", os.path.join(REPO, "bench", "op_host.py"))
op_host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(op_host)

TORCH = importlib.util.find_spec("torch") is not None


def parse(*argv):
    """Parses argv; returns the arguments, or the SystemExit code and what
    argparse printed on standard error."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return op_host.parser().parse_args(list(argv)), ""
        except SystemExit as e:
            return e.code, err.getvalue()


class ArgsTest(unittest.TestCase):
    def test_defaults(self):
        a, _ = parse()
        self.assertEqual(a.shapes, [(4096, 4096), (1024, 4096), (6144, 4096), (28672, 4096), (4096, 14336)])
        self.assertEqual(a.tokens, [1, 16, 512, 2048])
        self.assertEqual((a.dtype, a.calls, a.reps, a.activations, a.json, a.no_profile, a.parts),
                         ("bf16", 100, 21, 8, None, False, False))
        self.assertTrue(parse("--parts")[0].parts)
        self.assertEqual(a.package, os.path.join(REPO, "python"))

    def test_good(self):
        a, _ = parse("--shapes", "1024x4096, 64X128", "--tokens", "3,65", "--dtype", "f16", "--calls", "7", "--reps", "1",
                     "--activations", "1", "--json", "o.json", "--no-profile")
        self.assertEqual((a.shapes, a.tokens, a.dtype, a.calls, a.reps, a.activations, a.json, a.no_profile),
                         ([(1024, 4096), (64, 128)], [3, 65], "f16", 7, 1, 1, "o.json", True))

    def test_bad(self):
        cases = [
            (["--shapes", "4096"], "shape '4096': want NxK"),
            (["--shapes", "4096x4096,x"], "shape 'x': want NxK"),
            (["--shapes", "4010x4096"], "shape 4010x4096: the kernels need n % 32 == 0 and k % 64 == 0"),
            (["--shapes", "4096x100"], "shape 4096x100: the kernels need"),
            (["--shapes", "0x0"], "shape 0x0: the kernels need"),
            (["--shapes=-32x64"], "want NxK"),
            (["--tokens", "0"], "0 is not positive"),
            (["--tokens", "1,a"], "'a' is not an integer"),
            (["--calls", "-1"], "-1 is not positive"),
            (["--activations", "0"], "0 is not positive"),
            (["--dtype", "f32"], "invalid choice"),
        ]
        for argv, want in cases:
            with self.subTest(argv=argv):
                code, err = parse(*argv)
                self.assertEqual(code, 2)
                self.assertIn(want, err)
                self.assertEqual(len([ln for ln in err.splitlines() if "error:" in ln]), 1)

    def test_no_package(self):
        with tempfile.TemporaryDirectory() as tmp:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(op_host.main(["--package", tmp]), 2)
            self.assertEqual(err.getvalue(), f"op_host.py: {tmp}: no sfsurgery package in it\n")

    @unittest.skipIf(TORCH, "torch is installed: main would measure")
    def test_no_torch(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(op_host.main([]), 2)
        self.assertEqual(err.getvalue(), "op_host.py: needs torch (pip install torch)\n")


def doc():
    rows = []
    for n, k, m, us, path in [
        (4096, 4096, 1, {"linear": 20.0, "nn_linear": 22.0, "op": 15.0, "module": 11.0}, "decode kernel"),
        (4096, 4096, 512, {"linear": 20.0, "nn_linear": 24.0, "op": 30.0, "module": 12.0}, "prefill kernel"),
        (1024, 4096, 2048, {"linear": 21.0, "nn_linear": 23.0, "module": 46.0}, "prefill decode"),
    ]:
        loops = {key: [v] for key, v in us.items()}
        rows.append({"n": n, "k": k, "m": m, "path": path, "us": op_host.medians(loops), "ratio": op_host.ratios(loops),
                     "loops_us": loops})
    rows[0]["profiler_us"] = {"linear": {"bench::linear": 45.5, "aten::mm": 30.25}, "op": {"bench::op": 60.0, "sfsurgery::linear": 50.0}}
    return {"schema": op_host.SCHEMA, "device": "NVIDIA H200", "torch": "2.11.0", "dtype": "bf16", "calls": 100, "reps": 21, "activations": 8,
            "command": "python3 bench/op_host.py", "rows": rows}


class RenderTest(unittest.TestCase):
    def test_ratios(self):
        """A ratio is the median of the rounds' ratios, not the ratio of
        the medians: here the medians' ratio would be 30/20 = 1.5."""
        samples = {"linear": [10.0, 20.0, 40.0], "nn_linear": [25.0], "op": [20.0, 30.0, 44.0], "module": [30.0]}
        self.assertEqual(op_host.ratios(samples), {"op_vs_linear": 1.5, "module_vs_nn_linear": 1.2})
        samples["op"] = [30.0, 30.0, 20.0]  # rounds' ratios 3, 1.5 and 0.5
        self.assertEqual(op_host.ratios(samples)["op_vs_linear"], 1.5)
        samples["linear"] = [30.0, 10.0, 40.0]  # 1, 3, 0.5
        self.assertEqual(op_host.ratios(samples)["op_vs_linear"], 1.0)
        self.assertEqual(op_host.ratios({"linear": [20.0], "nn_linear": [25.0], "module": [5.0]}),
                         {"op_vs_linear": None, "module_vs_nn_linear": 0.2})
        self.assertEqual(op_host.ratios({"linear": [0.0], "op": [1.0]}), {"op_vs_linear": None, "module_vs_nn_linear": None})

    def test_medians(self):
        self.assertEqual(op_host.medians({"linear": [3.0, 1.0, 2.0], "op": [4.0, 1.0], "module": []}),
                         {"linear": 2.0, "op": 2.5})

    def test_rotations(self):
        self.assertEqual(op_host.rotations(["a", "b", "c"], 4), [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]])
        self.assertEqual(op_host.rotations([], 2), [[], []])

    def test_table(self):
        out = op_host.render(doc()).splitlines()
        self.assertEqual(out[0], "NVIDIA H200, torch 2.11.0, bf16, x [1, m, k] (calls take 8 in turn), no_grad; host µs per call, median of 21 rounds of a 100-call loop each; ratios paired by round")
        self.assertEqual(out[1].split(), ["shape", "m", "F.linear", "nn.Linear", "op", "SparseLinear", "op/F.linear", "SparseLinear/nn.Linear", "path"])
        self.assertEqual(out[2].split(), ["4096x4096", "1", "20.0", "22.0", "15.0", "11.0", "0.75", "0.50", "decode", "kernel"])
        self.assertEqual(out[3].split(), ["4096x4096", "512", "20.0", "24.0", "30.0", "12.0", "1.50", "0.50", "prefill", "kernel"])
        self.assertEqual(out[4].split(), ["1024x4096", "2048", "21.0", "23.0", "-", "46.0", "-", "2.00", "prefill", "decode"])
        self.assertEqual(out[5], "largest op/F.linear: 1.50 (4096x4096, m = 512)")
        self.assertEqual(out[6], "largest SparseLinear/nn.Linear: 2.00 (1024x4096, m = 2048)")
        self.assertEqual(out[9], "  4096x4096 m=1: F.linear 45.5 [aten::mm 30.2]; op 60.0 [sfsurgery::linear 50.0]")
        self.assertEqual(out[10], "  4096x4096 m=512: ")
        # the columns line up: every row as wide as the header
        self.assertEqual(len({len(line) for line in out[1:3]}), 1)

    def test_package(self):
        d = doc()
        d["package"] = "/old/python"
        self.assertTrue(op_host.render(d).splitlines()[0].endswith("ratios paired by round; sfsurgery from /old/python"))

    def test_parts(self):
        """Rows with the op's parts list them, in PARTS' order, beside the
        op's time; rows without (no op, or no --parts) are left out."""
        d = doc()
        d["rows"][1]["parts_us"] = {"alloc": 10.16, "checks": 3.95, "launch": 7.54, "launch_new_x": 9.87, "loop": 0.07}
        out = op_host.render(d).splitlines()
        i = out.index("parts of an op call, host µs each timed alone in its loop (--parts), beside the whole op:")
        self.assertEqual(out[i + 1], "  4096x4096 m=512: alloc y 10.2, checks 4.0, launch 7.5, launch, new x 9.9, loop 0.1; op 30.0")
        self.assertEqual(out[i + 2], "")
        self.assertNotIn("parts of an op call", op_host.render(doc()))

    def test_no_profile(self):
        d = doc()
        del d["rows"][0]["profiler_us"]
        self.assertNotIn("torch.profiler", op_host.render(d))


class JSONTest(unittest.TestCase):
    def test_write(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            op_host.write_json(path, doc())
            with open(path) as f:
                self.assertEqual(json.load(f), doc())
            self.assertEqual(os.listdir(tmp), ["out.json"])

    def test_write_fails_whole(self):
        """A document that cannot be written leaves neither a file at the
        path nor a temporary beside it, and an existing file as it was."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            with open(path, "w") as f:
                f.write("before")
            with self.assertRaises(TypeError):
                op_host.write_json(path, {"rows": [object()]})
            self.assertEqual(os.listdir(tmp), ["out.json"])
            with open(path) as f:
                self.assertEqual(f.read(), "before")


class CommittedTest(unittest.TestCase):
    """docs/op-host-h200.json is op_host.py's document, and docs/serve.md
    states its ranges of ratios."""

    def test_serve_md_states_the_ranges(self):
        with open(os.path.join(REPO, "docs", "op-host-h200.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["schema"], op_host.SCHEMA)
        self.assertGreater(len(doc["rows"]), 0)
        with open(os.path.join(REPO, "docs", "serve.md")) as f:
            md = " ".join(f.read().split())
        for key, phrase in (("module_vs_nn_linear", "`SparseLinear` {lo:.2f}–{hi:.2f}x of `nn.Linear`'s"),
                            ("op_vs_linear", "the operator through the dispatcher {lo:.2f}–{hi:.2f}x of `F.linear`'s")):
            ratios = [r["ratio"][key] for r in doc["rows"]]
            self.assertIn(phrase.format(lo=min(ratios), hi=max(ratios)), md, key)


class ProfilerTest(unittest.TestCase):
    def test_cpu_per_call(self):
        from types import SimpleNamespace as E

        events = [E(key="bench::op", cpu_time_total=3000.0), E(key="aten::mm", cpu_time_total=1800.0),
                  E(key="bench::op", cpu_time_total=0.0),  # the range's annotation on the GPU's timeline
                  E(key="aten::copy_", cpu_time_total=900.0)]
        self.assertEqual(op_host.cpu_per_call(events, ["bench::op", "aten::mm"], 100), {"bench::op": 30.0, "aten::mm": 18.0})
        self.assertEqual(op_host.cpu_per_call(events[2:], ["bench::op"], 100), {"bench::op": 0.0})


if __name__ == "__main__":
    unittest.main()
