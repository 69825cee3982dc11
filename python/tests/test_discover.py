"""Where launch records come from: the planner by default, a launch file
only through the planner's check, and every tampered record refused in
one line (CPU only: the real binary plans for named H100 limits; a
stand-in binary covers the ways running it fails)."""

import copy
import json
import os
import re
import stat
import tempfile
import unittest
import warnings
from unittest import mock

from fixtures import golden_launches, sfsurgery_bin

from sfsurgery import discover, records
from sfsurgery.errors import RecordError

TINY_SHAPES = [(256, 256), (128, 256), (768, 256), (256, 768)]


class DiscoverTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.ckpt = os.path.join(self.dir.name, "ckpt")
        os.mkdir(self.ckpt)
        self.real_bin = sfsurgery_bin()
        env = {k: v for k, v in os.environ.items() if k not in (discover.ENV_LAUNCHES, discover.ENV_BIN)}
        # PATH without any sfsurgery on it.
        dirs = os.environ.get("PATH", "").split(os.pathsep)
        env["PATH"] = os.pathsep.join(d for d in dirs if d and not os.access(os.path.join(d, "sfsurgery"), os.X_OK))
        patcher = mock.patch.dict(os.environ, env, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)

    def write(self, name, doc):
        p = os.path.join(self.dir.name, name)
        with open(p, "w") as f:
            json.dump(doc, f)
        return p

    def fake_bin(self, script):
        """A stand-in sfsurgery that logs its arguments to args.log, then
        runs script."""
        p = os.path.join(self.dir.name, "fake-sfsurgery")
        log = os.path.join(self.dir.name, "args.log")
        with open(p, "w") as f:
            f.write(f'#!/bin/sh\necho "$@" > {log}\n{script}\n')
        os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR)
        return p

    def logged_args(self):
        with open(os.path.join(self.dir.name, "args.log")) as f:
            return f.read().split()

    def test_default_plans_and_ignores_the_checkpoints_file(self):
        """By default the planner plans; a launch file inside the checkpoint
        is not read (a warning says so), so its content cannot matter."""
        with open(os.path.join(self.ckpt, discover.LAUNCHES_FILE), "w") as f:
            f.write("{ a tampered or broken file")
        os.environ[discover.ENV_BIN] = self.fake_bin("cat '" + self.write("doc.json", golden_launches()) + "'")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            t = discover.find_table(self.ckpt, TINY_SHAPES, "bf16")
        self.assertEqual(sorted(t.launches), sorted(TINY_SHAPES))
        self.assertNotIn("--from", self.logged_args())
        self.assertEqual(len(w), 1)
        self.assertIn(f"{discover.LAUNCHES_FILE} not read: a launch file inside a checkpoint is read only when asked for", str(w[0].message))
        for source in ("plan", None):
            os.environ[discover.ENV_LAUNCHES] = source or ""
            discover.find_table(self.ckpt, TINY_SHAPES, "bf16", launches=source)
            self.assertNotIn("--from", self.logged_args())

    def test_sources_go_through_the_planner(self):
        """"checkpoint", $SFSURGERY_LAUNCHES and a named file each reach the
        planner as plan --from FILE, with the shapes and dtype asked for."""
        os.environ[discover.ENV_BIN] = self.fake_bin("cat '" + self.write("doc.json", golden_launches()) + "'")
        ck = os.path.join(self.ckpt, discover.POLICY_FILE)
        with open(ck, "w") as f:
            f.write("{}")
        named = self.write("named.json", {})
        env = self.write("env.json", {})
        for launches, envval, want in [("checkpoint", None, ck), (named, env, named), (None, env, env), (None, "checkpoint", ck)]:
            with self.subTest(launches=launches, env=envval):
                if envval:
                    os.environ[discover.ENV_LAUNCHES] = envval
                discover.find_table(self.ckpt, TINY_SHAPES, "bf16", launches=launches, ordinal=1)
                args = self.logged_args()
                self.assertEqual(args[:2], ["plan", "--shapes"])
                self.assertEqual(args[args.index("--from") + 1], want)
                self.assertEqual(args[args.index("--dtype") + 1], "bf16")
                self.assertEqual(args[args.index("--gpu") + 1], "1")
        launches = os.path.join(self.ckpt, discover.LAUNCHES_FILE)
        with open(launches, "w") as f:
            f.write("{}")
        discover.find_table(self.ckpt, TINY_SHAPES, "bf16", launches="checkpoint")
        self.assertEqual(self.logged_args()[self.logged_args().index("--from") + 1], launches, "the launch document before the policy")

    def test_failures(self):
        golden = golden_launches()
        cases = [
            ("named file missing", dict(launches=os.path.join(self.dir.name, "nope.json")), "", r"nope.json: no such launch file"),
            ("checkpoint without a file", dict(launches="checkpoint"), "", r"ckpt: launches 'checkpoint', but the checkpoint has no sfsurgery-launches.json"),
            ("no binary", {}, None, r"ckpt: the launch records come from the Go planner \(sfsurgery plan\): put the sfsurgery binary on PATH"),
            ("plan fails", {}, "echo 'sfsurgery: plan needs the GPU' >&2; exit 2", r"plan: plan needs the GPU$"),
            ("plan prints garbage", {}, "echo '{oops'", r"plan: output is not JSON"),
            ("plan prints other records", {}, "echo '" + json.dumps(dict(golden, shapes=golden["shapes"][:1])) + "'",
             r"launch records of h100 \(named limits\) have none for 128x256, .*"),
        ]
        for name, kw, script, want in cases:
            with self.subTest(name):
                if script is None:
                    os.environ.pop(discover.ENV_BIN, None)
                else:
                    os.environ[discover.ENV_BIN] = self.fake_bin(script)
                with self.assertRaisesRegex(RecordError, want) as cm:
                    discover.find_table(self.ckpt, TINY_SHAPES, "bf16", **kw)
                self.assertNotIn("\n", str(cm.exception))

    def test_plan_output_dtype(self):
        os.environ[discover.ENV_BIN] = self.fake_bin("cat '" + self.write("doc.json", golden_launches()) + "'")
        with self.assertRaisesRegex(RecordError, "launch records for bf16, the checkpoint is f16"):
            discover.find_table(self.ckpt, TINY_SHAPES, "f16")

    def test_plan_hangs(self):
        os.environ[discover.ENV_BIN] = self.fake_bin("sleep 5")
        with mock.patch.object(discover.tool, "TIMEOUT_S", 0.2):
            with self.assertRaisesRegex(RecordError, r"plan: no answer in 0.2 s"):
                discover.find_table(self.ckpt, TINY_SHAPES, "bf16")

    def test_real_plan_without_gpu(self):
        """The real binary on a machine without a GPU says so in one line
        (on the GPU host it plans instead)."""
        os.environ[discover.ENV_BIN] = self.real_bin
        try:
            t = discover.find_table(self.ckpt, TINY_SHAPES, "bf16")
        except RecordError as e:
            self.assertRegex(str(e), r"plan: .*(GPU|CUDA|--limits)")
            self.assertNotIn("\n", str(e))
        else:
            self.assertEqual(sorted(t.launches), sorted(TINY_SHAPES))

    def test_plan_command(self):
        self.assertEqual(discover.plan_command([(768, 256), (256, 256)], "f16"),
                         ["sfsurgery", "plan", "--shapes", "256x256,768x256", "--dtype", "f16", "--json"])
        self.assertEqual(discover.plan_command([(256, 256)], "bf16", 1)[-2:], ["--gpu", "1"])
        self.assertEqual(discover.plan_command([(256, 256)], "bf16", 1, "f.json", "h100")[-4:], ["--from", "f.json", "--limits", "h100"])
        self.assertEqual(discover.plan_command([(256, 256)], "bf16", 1, None, "{}", "NVIDIA H200")[-4:], ["--limits", "{}", "--gpu-name", "NVIDIA H200"])


def _record(doc, s, j):
    return doc["shapes"][s]["launches"][j]["launch"]


def _param(rec, name):
    return next(p for p in rec["params"] if p["name"] == name)


# One change to one record of the golden document each (shape index,
# launch index or None for the document, the change, what the refusal
# names). Record (0, 0) is a clustered launch with a fallback at m = 1,
# record (0, 6) split-K at m = 64 without one.
def _tamperings():
    def rec(s, j, f):
        return lambda d: f(_record(d, s, j))

    def mul(key, i, by):
        def f(r):
            r[key][i] *= by
        return f

    def setk(key, v):
        def f(r):
            r[key] = v
        return f

    def fb(f):
        return lambda r: f(r["fallback"])

    def param(name, v):
        def f(r):
            _param(r, name)["value"] = v
        return f

    return [
        ("grid.x doubled", rec(0, 6, mul("grid", 0, 2)), "m = 64", "launch.grid is [4 4 4], the planner's [2 4 4]"),
        ("grid.y times 4", rec(0, 6, mul("grid", 1, 4)), "m = 64", "launch.grid is"),
        ("grid.z doubled", rec(0, 6, mul("grid", 2, 2)), "m = 64", "launch.grid is"),
        ("block of 32 threads", rec(0, 6, setk("block", [32, 1, 1])), "m = 64", "launch.block is [32 1 1]"),
        ("cluster", rec(0, 0, setk("cluster", [1, 1, 1])), "m = 1", "launch.cluster is [1 1 1]"),
        ("shared bytes 1024", rec(0, 6, setk("shared_bytes", 1024)), "m = 64", "launch.shared_bytes is 1024"),
        ("cooperative", rec(0, 6, lambda r: r.update(cooperative=not r["cooperative"])), "m = 64", "launch.cooperative is true"),
        ("workspace partials 1", rec(0, 6, lambda r: r["workspace"].update(partials=1)), "m = 64", "launch.workspace.partials is 1,"),
        ("workspace counters", rec(0, 6, lambda r: r["workspace"].update(counters=4)), "m = 64", "launch.workspace.counters is 4,"),
        ("xwin 100000", rec(0, 6, param("xwin", 100000)), "m = 64", "int xwin = 100000"),
        ("coop", rec(0, 6, param("coop", 1)), "m = 64", "int coop = 1"),
        ("M", rec(0, 6, param("M", 63)), "m = 64", "int M = 63"),
        ("N", rec(0, 6, param("N", 512)), "m = 64", "int N = 512"),
        ("K", rec(0, 6, param("K", 512)), "m = 64", "int K = 512"),
        ("source swapped", rec(0, 6, lambda r: r["params"][1].update(source="packed")), "m = 64", "launch.params[1] is const uint16_t* X from packed"),
        ("entry swapped", rec(0, 6, setk("entry", "gemv_hy_bf16_t2_s4")), "m = 64", "launch.entry gemv_hy_bf16_t2_s4 is not among"),
        ("module swapped", rec(0, 6, setk("module", "kernels/ptx/sfsurgery.ptx")), "m = 64", "launch.module is kernels/ptx/sfsurgery.ptx"),
        ("fallback grid", rec(0, 0, fb(mul("grid", 1, 4))), "m = 1", "launch.fallback.grid is"),
        ("fallback entry", rec(0, 0, fb(setk("entry", "gemv_wg_pair_bf16_t1_s2"))), "m = 1", "launch.fallback.entry"),
        ("fallback shared bytes", rec(0, 0, fb(setk("shared_bytes", 1024))), "m = 1", "launch.fallback.shared_bytes is 1024"),
        ("fallback removed", rec(0, 0, lambda r: r.pop("fallback")), "m = 1", "launch.fallback is none"),
        ("fallback added", rec(0, 6, lambda r: r.update(fallback=copy.deepcopy(r))), "m = 64", "launch.fallback is"),
        ("prefill shared bytes", lambda d: d["shapes"][0]["prefill"][0].update(shared_bytes=1024), "(256x256)", "prefill[0].shared_bytes is 1024"),
        ("prefill tile", lambda d: d["shapes"][0]["prefill"][0].update(rows=256, block=384, entry="spmm_wg_bf16_r256_t64"), "(256x256)", "prefill[0].entry is"),
        ("prefill range", lambda d: d["shapes"][0]["prefill"][0].update(to=1 << 20), "(256x256)", "prefill[0].to is"),
        ("limits", lambda d: d["limits"].update(sms=114), "launches.json", "planned for h100 (named limits) (114 SMs"),
        ("dtype", lambda d: d.update(dtype="F16"), "launches.json", "records for F16, the weights are BF16"),
        ("schema", lambda d: d.update(schema="sfsurgery-launches/9"), "launches.json", "a file of another sfsurgery version"),
        ("unknown field", rec(0, 6, setk("grid_override", [1, 1, 1])), "launches.json", 'unknown field "grid_override"'),
    ]


class TamperedTest(unittest.TestCase):
    """The golden document as `sfsurgery plan` wrote it passes the
    planner's check (named H100 limits); every tampering of it, and of a
    policy made of it, is refused naming the file, the shape, m and the
    field; none reaches records.parse."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        patcher = mock.patch.dict(os.environ, {discover.ENV_BIN: sfsurgery_bin()})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.ckpt = self.dir.name

    def find(self, doc, name="launches.json"):
        p = os.path.join(self.dir.name, name)
        with open(p, "w") as f:
            json.dump(doc, f)
        return p, discover.find_table(self.ckpt, TINY_SHAPES, "bf16", launches=p, limits="h100")

    def test_untampered(self):
        doc = golden_launches()
        _, t = self.find(doc)
        want = records.parse(doc)
        self.assertEqual(t.launches, want.launches)
        self.assertEqual(t.prefill, want.prefill)

    def test_tampered(self):
        cases = _tamperings()
        for name, tamper, where, field in cases:
            with self.subTest(name):
                doc = golden_launches()
                tamper(doc)
                with mock.patch.object(records, "parse", side_effect=AssertionError("a refused file reached the parser")):
                    with self.assertRaises(RecordError) as cm:
                        self.find(doc)
                msg = str(cm.exception)
                self.assertNotIn("\n", msg)
                self.assertIn(os.path.join(self.dir.name, "launches.json"), msg)
                self.assertIn(where, msg)
                self.assertIn(field, msg)
                if where.startswith("m = "):
                    self.assertIn("shapes[0] (256x256)", msg)
                if "unknown field" not in field:
                    self.assertTrue(msg.endswith("; plan on this GPU instead: load without launches or $SFSURGERY_LAUNCHES"), msg)
        self.assertGreaterEqual(len(cases), 25)

    def policy(self):
        """A policy whose ranges of ours carry the golden records (and
        prefill records), as bench --policy writes them."""
        doc = golden_launches()
        entries = []
        for s in doc["shapes"]:
            plans = [{"m": at["m"], "plan": at["plan"], "measured": True, "launch": at["launch"]} for at in s["launches"]]
            entries.append({"n": s["n"], "k": s["k"], "prefill": s["prefill"], "sparse": [
                {"min_m": 1, "max_m": 64, "backend": "ours", "speedup": 1.1, "plans": plans},
                {"min_m": 1024, "max_m": 4096, "backend": "cusparselt", "speedup": 1.3},
            ]})
        return {"schema": "sfsurgery-policy/2", "tool": "sfsurgery", "generated": "2026-11-01T00:00:00Z",
                "gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0", "driver": "13.0", "dtype": "BF16",
                "min_speedup": 1.05, "measured_m": [1, 64], "default": "dense", "rule": "", "entries": entries}

    def test_given_limits(self):
        """The limits the serving package reads from its GPU, with the GPU's
        name: the records of the named limits, and a policy of another GPU
        refused."""
        lim = json.dumps({"sms": 132, "shared_per_block": 232448, "shared_per_sm": 233472, "warpgroup": True})
        p = os.path.join(self.dir.name, "policy.json")
        with open(p, "w") as f:
            json.dump(self.policy(), f)
        t = discover.find_table(self.ckpt, TINY_SHAPES, "bf16", launches=p, limits=lim, gpu_name="NVIDIA H100 80GB HBM3")
        self.assertEqual(t.launches, records.parse(golden_launches()).launches)
        self.assertEqual(t.device, "NVIDIA H100 80GB HBM3 (given limits)")
        with self.assertRaisesRegex(RecordError, r"policy.json: not the planner's launch records for this device: measured on NVIDIA H100 80GB HBM3, this GPU is NVIDIA H200"):
            discover.find_table(self.ckpt, TINY_SHAPES, "bf16", launches=p, limits=lim, gpu_name="NVIDIA H200")

    def test_policy(self):
        _, t = self.find(self.policy(), "policy.json")
        self.assertEqual(t.launches, records.parse(golden_launches()).launches)
        for name, tamper, want in [
            ("grid", lambda p: p["entries"][1]["sparse"][0]["plans"][0]["launch"]["grid"].__setitem__(0, 2), "entries[1] (128x256) sparse[0] m = 1"),
            ("plan name", lambda p: p["entries"][0]["sparse"][0]["plans"][2].update(plan="decode sc4 w8 kw2 s1 xw0"), "names another launch"),
            ("prefill", lambda p: p["entries"][2]["prefill"][0].update(block=1024), "prefill[0].block is 1024"),
            ("outside its range", lambda p: p["entries"][0]["sparse"][0].update(max_m=8), "outside its range 1…8"),
        ]:
            with self.subTest(name):
                pol = self.policy()
                tamper(pol)
                with self.assertRaisesRegex(RecordError, re.escape(want)):
                    self.find(pol, "policy.json")


if __name__ == "__main__":
    unittest.main()
