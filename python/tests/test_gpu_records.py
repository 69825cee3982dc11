"""Launch records on the GPU: a model loads with records its own GPU's
planner checked, and every tampered record is refused before anything is
launched. Skipped without torch and a CUDA GPU. Run under
compute-sanitizer's memcheck on the GPU host (docs/serve.md, "Launch
records") to show that what does run touches nothing outside its
buffers."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from fixtures import pruned, sfsurgery_bin
from test_discover import _tamperings

try:
    import torch
except ImportError:
    torch = None

GPU = torch is not None and torch.cuda.is_available()
try:
    import transformers
except ImportError:
    transformers = None


@unittest.skipUnless(transformers is not None and torch is not None, "needs torch and transformers")
class QuantizerConfigTest(unittest.TestCase):
    """A checkpoint's config.json cannot choose where launch records come
    from or the prefill path: those keys are dropped."""

    def test_loading_options_ignored(self):
        from sfsurgery.hf import SfsurgeryConfig

        q = SfsurgeryConfig.from_dict({"quant_method": "sfsurgery", "format": "ampere", "targets": ["a"], "ignore": [],
                                       "launches": "/tmp/evil.json", "prefill": "cusparselt", "extra": 1})
        self.assertFalse(hasattr(q, "launches") or hasattr(q, "prefill"))
        self.assertEqual((q.targets, q.extra), (["a"], 1))
        self.assertNotIn("launches", q.to_dict())


@unittest.skipUnless(GPU, "needs torch and a CUDA GPU")
class GPURecordsTest(unittest.TestCase):
    def setUp(self):
        os.environ["SFSURGERY_BIN"] = sfsurgery_bin()
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        # A copy of the pruned tiny checkpoint with this GPU's plan inside.
        self.ckpt = os.path.join(self.dir.name, "tiny-2of4")
        shutil.copytree(pruned(), self.ckpt)
        out = subprocess.run([sfsurgery_bin(), "plan", self.ckpt, "--fuse", "--json"],
                             check=True, capture_output=True, text=True).stdout
        self.doc = json.loads(out)
        self.file = os.path.join(self.ckpt, "sfsurgery-launches.json")
        with open(self.file, "w") as f:
            json.dump(self.doc, f)

    def forward(self, model):
        """Forwards of 2 sequences of 1, 4, 20 and 300 tokens: 2, 8, 40 and
        600 tokens a product, the decode kernels and the prefill path."""
        gen = torch.Generator(device="cuda").manual_seed(4)
        with torch.no_grad():
            for t in (1, 4, 20, 300):
                ids = torch.randint(3, 512, (2, t), device="cuda", generator=gen)
                self.assertTrue(torch.isfinite(model(ids).logits.float()).all(), t)
        torch.cuda.synchronize()

    def test_checkpoint_records_run(self):
        """The checkpoint's own records, checked by the planner, load and
        run; so does the default (planned here)."""
        import sfsurgery

        for launches in ("checkpoint", None):
            with self.subTest(launches=launches):
                self.forward(sfsurgery.load(self.ckpt, launches=launches))

    def test_tampered_refused_at_load(self):
        """Each tampering of the checkpoint's records (the CPU table's,
        here against this GPU's planner) fails the load in one line; no
        kernel is launched from it."""
        import sfsurgery
        from sfsurgery.errors import RecordError

        refused = 0
        for name, tamper, _, _ in _tamperings():
            with self.subTest(name):
                doc = json.loads(json.dumps(self.doc))
                try:
                    tamper(doc)
                except (IndexError, KeyError, TypeError):
                    continue  # this GPU's plan has no such record or field
                if doc == self.doc:
                    continue  # the change is this GPU's own value
                refused += 1
                with open(self.file, "w") as f:
                    json.dump(doc, f)
                with self.assertRaises(RecordError) as cm:
                    sfsurgery.load(self.ckpt, launches="checkpoint")
                self.assertNotIn("\n", str(cm.exception))
                self.assertIn(self.file, str(cm.exception))
        self.assertGreaterEqual(refused, 20, "too few tamperings applied: the test proves little")


if __name__ == "__main__":
    unittest.main()
