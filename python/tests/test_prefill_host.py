"""bench/prefill_host.py's parts that need neither torch nor a GPU: its
arguments, the summary, the ratios, the profiler's rows, the table and
its refusals before anything loads."""

import contextlib
import importlib.util
import io
import os
import tempfile
import types
import unittest

from fixtures import REPO

_spec = importlib.util.spec_from_file_location("prefill_host", os.path.join(REPO, "bench", "prefill_host.py"))
prefill_host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prefill_host)


def parse(*argv):
    """Parses argv; returns the arguments, or the SystemExit code and what
    argparse printed on standard error."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return prefill_host.parser().parse_args(list(argv)), ""
        except SystemExit as e:
            return e.code, err.getvalue()


def event(key, count=1, self_cpu=0.0, cpu=0.0, **device):
    """A stand-in for one of torch.profiler's averaged events."""
    return types.SimpleNamespace(key=key, count=count, self_cpu_time_total=self_cpu, cpu_time_total=cpu, **device)


class ArgsTest(unittest.TestCase):
    def test_defaults(self):
        a, _ = parse("--sparse", "s", "--dense", "d")
        self.assertEqual((a.sparse, a.dense, a.tokens, a.batch, a.reps, a.top, a.json), ("s", "d", 512, 1, 20, 12, None))
        self.assertEqual(a.package, os.path.join(REPO, "python"))

    def test_good(self):
        a, _ = parse("--sparse", "s", "--dense", "d", "--tokens", "4096", "--batch", "8", "--reps", "3", "--top", "5",
                     "--json", "o.json")
        self.assertEqual((a.tokens, a.batch, a.reps, a.top, a.json), (4096, 8, 3, 5, "o.json"))

    def test_bad(self):
        for argv, want in [
            (("--dense", "d"), "--sparse"),
            (("--sparse", "s"), "--dense"),
            (("--sparse", "s", "--dense", "d", "--tokens", "0"), "0 is not positive"),
            (("--sparse", "s", "--dense", "d", "--reps", "x"), "'x' is not an integer"),
            (("--sparse", "s", "--dense", "d", "--batch", "-2"), "-2 is not positive"),
        ]:
            with self.subTest(argv=argv):
                code, err = parse(*argv)
                self.assertEqual(code, 2)
                self.assertIn(want, err)


class SummaryTest(unittest.TestCase):
    def test_median_and_best(self):
        self.assertEqual(prefill_host.summary([0.003, 0.001, 0.002]), {"median_ms": 2.0, "best_ms": 1.0})
        s = prefill_host.summary([0.004, 0.001])
        self.assertAlmostEqual(s["median_ms"], 2.5)
        self.assertAlmostEqual(s["best_ms"], 1.0)

    def test_ratios_are_dense_over_ours(self):
        models = {
            "sparse": {"forward": {"median_ms": 4.0}, "host": {"median_ms": 3.0}, "ttft": {"median_ms": 5.0}, "gpu_busy_ms": 2.0},
            "dense": {"forward": {"median_ms": 5.0}, "host": {"median_ms": 3.0}, "ttft": {"median_ms": 4.0}, "gpu_busy_ms": 3.0},
        }
        self.assertEqual(prefill_host.ratios(models), {"forward": 1.25, "host": 1.0, "ttft": 0.8, "gpu_busy": 1.5})

    def test_ratios_missing(self):
        r = prefill_host.ratios({"sparse": {"forward": {"median_ms": 4.0}, "gpu_busy_ms": 0.0}, "dense": {}})
        self.assertEqual(r, {"forward": None, "host": None, "ttft": None, "gpu_busy": None})

    def test_bound(self):
        """Host-bound where the GPU is busy for less than 90% of the
        forward's wall time."""
        for forward, busy, want in [(10.0, 2.0, "host"), (10.0, 8.9, "host"), (10.0, 9.0, "GPU"), (10.0, 9.8, "GPU")]:
            with self.subTest(forward=forward, busy=busy):
                m = {"forward": {"median_ms": forward}, "gpu_busy_ms": busy}
                self.assertEqual(prefill_host.bound(m), want)
        self.assertEqual(prefill_host.bound({"forward": {"median_ms": 1.0}}), "-")
        self.assertEqual(prefill_host.bound({"gpu_busy_ms": 1.0}), "-")


class ProfilerRowsTest(unittest.TestCase):
    def test_top_ops_by_self_host_time(self):
        events = [event("aten::mm", 29, 600.0, 880.0), event("cudaLaunchKernel", 147, 950.0, 950.0),
                  event("aten::mul", 40, 300.0, 540.0), event("aten::add", 26, 300.0, 390.0)]
        got = prefill_host.top_ops(events, 3)
        self.assertEqual([r["name"] for r in got], ["cudaLaunchKernel", "aten::mm", "aten::add"])
        self.assertEqual(got[1], {"name": "aten::mm", "calls": 29, "self_host_us": 600.0, "host_us": 880.0})
        self.assertEqual(len(prefill_host.top_ops(events, 10)), 4)

    def test_gpu_busy_counts_the_device_events(self):
        cpu, cuda = "DeviceType.CPU", "DeviceType.CUDA"
        events = [event("aten::mm", device_type=cpu, self_device_time_total=2053.0),
                  event("nvjet_tst_128x256", device_type=cuda, self_device_time_total=2053.0),
                  event("aten::mul", device_type=cpu, self_device_time_total=280.0),
                  event("elementwise_kernel", device_type=cuda, self_device_time_total=280.0),
                  event("bench::range", device_type=cuda, is_user_annotation=True, self_device_time_total=5000.0),
                  event("cudaLaunchKernel", device_type=cpu, self_device_time_total=0.0)]
        self.assertAlmostEqual(prefill_host.gpu_busy_ms(events), 2.333)
        self.assertEqual(prefill_host.kernel_count(events), 2)
        events[1].count = 32
        self.assertEqual(prefill_host.kernel_count(events), 33)

    def test_gpu_busy_older_torch(self):
        events = [event("void gemm", device_type="DeviceType.CUDA", self_cuda_time_total=1000.0),
                  event("aten::mul", device_type="DeviceType.CPU", self_cuda_time_total=1000.0), event("unknown")]
        self.assertAlmostEqual(prefill_host.gpu_busy_ms(events), 1.0)


def document():
    t = lambda med, best: {"median_ms": med, "best_ms": best}  # noqa: E731
    models = {
        "sparse": {"forward": t(4.1, 4.0), "host": t(3.9, 3.7), "ttft": t(33.0, 32.8), "gpu_busy_ms": 2.1, "kernels": 1180,
                   "top_ops": [{"name": "sfsurgery::linear (direct)", "calls": 16, "self_host_us": 670.4, "host_us": 855.4}]},
        "dense": {"forward": t(4.3, 4.2), "host": t(4.1, 4.0), "ttft": t(30.0, 29.9), "gpu_busy_ms": 4.0, "kernels": 1276,
                  "top_ops": [{"name": "aten::mm", "calls": 29, "self_host_us": 647.8, "host_us": 885.9}]},
    }
    return {"device": "NVIDIA H200", "torch": "2.11.0", "transformers": "5.17.0", "tokens": 512, "batch": 1, "reps": 20,
            "models": models, "ratio": prefill_host.ratios(models)}


class RenderTest(unittest.TestCase):
    def test_table(self):
        lines = prefill_host.render(document()).splitlines()
        self.assertEqual(lines[0], "NVIDIA H200, torch 2.11.0, transformers 5.17.0; 1 x 512 tokens, eager, no_grad; "
                                   "ms, median (best) of 20 runs a visit")
        self.assertEqual(lines[1].split(), ["model", "forward", "host", "ttft", "GPU", "busy", "kernels", "bound"])
        self.assertEqual(lines[2].split(), ["sparse", "4.10", "(4.00)", "3.90", "(3.70)", "33.00", "(32.80)", "2.10", "1180", "host"])
        self.assertEqual(lines[3].split(), ["dense", "4.30", "(4.20)", "4.10", "(4.00)", "30.00", "(29.90)", "4.00", "1276", "GPU"])
        self.assertEqual(lines[4], "dense over ours: forward 1.05x, host 1.05x, ttft 0.91x, gpu_busy 1.90x")
        self.assertIn("sparse: the operators with the most host time in one forward (profiled; calls, self µs, total µs)", lines)
        self.assertIn("  sfsurgery::linear (direct)     16      670.4      855.4", lines)
        self.assertIn("  aten::mm     29      647.8      885.9", lines)

    def test_missing(self):
        """A time or a profile missing is "-", with no bound or ratio
        from it."""
        doc = document()
        doc["models"]["sparse"]["host"] = None
        doc["models"]["sparse"]["gpu_busy_ms"] = None
        doc["models"]["sparse"]["kernels"] = None
        doc["ratio"] = prefill_host.ratios(doc["models"])
        lines = prefill_host.render(doc).splitlines()
        self.assertEqual(lines[2].split(), ["sparse", "4.10", "(4.00)", "-", "33.00", "(32.80)", "-", "-", "-"])
        self.assertEqual(lines[4], "dense over ours: forward 1.05x, ttft 0.91x")

    def test_one_model(self):
        doc = document()
        del doc["models"]["dense"]
        doc["ratio"] = prefill_host.ratios(doc["models"])
        out = prefill_host.render(doc)
        self.assertNotIn("dense", out)
        self.assertNotIn("over ours", out)


class MainTest(unittest.TestCase):
    def test_refuses_a_directory_without_a_config(self):
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "good")
            os.mkdir(good)
            with open(os.path.join(good, "config.json"), "w") as f:
                f.write("{}")
            bad = os.path.join(d, "empty")
            os.mkdir(bad)
            for argv, want in [
                (["--sparse", bad, "--dense", good], f"prefill_host.py: --sparse {bad}: no config.json in it"),
                (["--sparse", good, "--dense", bad], f"prefill_host.py: --dense {bad}: no config.json in it"),
                (["--sparse", good, "--dense", good, "--package", bad], f"prefill_host.py: {bad}: no sfsurgery package in it"),
            ]:
                with self.subTest(argv=argv):
                    err = io.StringIO()
                    with contextlib.redirect_stderr(err):
                        code = prefill_host.main(argv)
                    self.assertEqual(code, 2)
                    self.assertEqual(err.getvalue().strip(), want)


if __name__ == "__main__":
    unittest.main()
