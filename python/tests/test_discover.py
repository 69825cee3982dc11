"""Finding launch records: the order of the sources, and every way it
fails, in one line (CPU only; the GPU plan path runs a stand-in binary)."""

import json
import os
import stat
import tempfile
import unittest
from unittest import mock

from fixtures import golden_launches, sfsurgery_bin

from sfsurgery import discover
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
        p = os.path.join(self.dir.name, "fake-sfsurgery")
        with open(p, "w") as f:
            f.write("#!/bin/sh\n" + script + "\n")
        os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR)
        return p

    def test_order(self):
        doc = golden_launches()
        named = dict(doc, device="named")
        env = dict(doc, device="env")
        local = dict(doc, device="checkpoint")
        with open(os.path.join(self.ckpt, discover.LAUNCHES_FILE), "w") as f:
            json.dump(local, f)
        self.assertEqual(discover.find_table(self.ckpt, TINY_SHAPES, "bf16").device, "checkpoint")
        os.environ[discover.ENV_LAUNCHES] = self.write("env.json", env)
        self.assertEqual(discover.find_table(self.ckpt, TINY_SHAPES, "bf16").device, "env")
        got = discover.find_table(self.ckpt, TINY_SHAPES, "bf16", launches=self.write("named.json", named))
        self.assertEqual(got.device, "named")

    def test_policy_in_checkpoint(self):
        doc = golden_launches()
        entries = []
        for s in doc["shapes"]:
            plans = [{"m": at["m"], "plan": at["plan"], "measured": True, "launch": at["launch"]} for at in s["launches"]]
            entries.append({"n": s["n"], "k": s["k"], "sparse": [{"min_m": 1, "max_m": 64, "backend": "ours", "speedup": 1.1, "plans": plans}]})
        policy = {"schema": "sfsurgery-policy/2", "dtype": "BF16", "gpu": "NVIDIA H100 80GB HBM3", "entries": entries}
        with open(os.path.join(self.ckpt, discover.POLICY_FILE), "w") as f:
            json.dump(policy, f)
        self.assertEqual(discover.find_table(self.ckpt, TINY_SHAPES, "bf16").device, "NVIDIA H100 80GB HBM3")

    def test_failures(self):
        golden = golden_launches()
        cases = [
            ("named file missing", dict(launches=os.path.join(self.dir.name, "nope.json")), None, r"nope.json: No such file"),
            ("no records, no binary", {}, None, r"ckpt: no launch records: put sfsurgery on PATH, or run `sfsurgery plan --shapes 128x256,256x256,256x768,768x256 --dtype bf16 --json > "),
            ("plan fails", {}, "echo 'sfsurgery: plan needs the GPU' >&2; exit 2", r"plan: sfsurgery: plan needs the GPU$"),
            ("plan prints garbage", {}, "echo '{oops'", r"plan: output is not JSON"),
            ("plan prints other records", {}, "echo '" + json.dumps(dict(golden, shapes=golden["shapes"][:1])) + "'",
             r"launch records of h100 \(named limits\) have none for 128x256, .*: run `sfsurgery plan --shapes"),
        ]
        for name, kw, script, want in cases:
            with self.subTest(name):
                if script is not None:
                    os.environ[discover.ENV_BIN] = self.fake_bin(script)
                else:
                    os.environ.pop(discover.ENV_BIN, None)
                with self.assertRaisesRegex(RecordError, want):
                    discover.find_table(self.ckpt, TINY_SHAPES, "bf16", **kw)

    def test_plan_output_used(self):
        os.environ[discover.ENV_BIN] = self.fake_bin("cat '" + self.write("doc.json", golden_launches()) + "'")
        t = discover.find_table(self.ckpt, TINY_SHAPES, "bf16")
        self.assertEqual(sorted(t.launches), sorted(TINY_SHAPES))
        with self.assertRaisesRegex(RecordError, "launch records for bf16, the checkpoint is f16"):
            discover.find_table(self.ckpt, TINY_SHAPES, "f16")

    def test_plan_hangs(self):
        os.environ[discover.ENV_BIN] = self.fake_bin("sleep 5")
        with mock.patch.object(discover, "PLAN_TIMEOUT_S", 0.2):
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


if __name__ == "__main__":
    unittest.main()
