"""The serving benchmark's committed results (docs/serve-*.json, written by
bench/serve.py) are well-formed, and docs/serve-h100.md shows their
figures (CPU only)."""

import glob
import json
import os
import re
import unittest

from fixtures import REPO

DOCS = os.path.join(REPO, "docs")


class ServeResultsTest(unittest.TestCase):
    def assertFigure(self, figure, doc, msg=None):
        """figure stands in doc as a whole number, not inside a longer one
        ("12.3" does not match in "112.34")."""
        if not re.search(r"(?<![\d.])" + re.escape(figure) + r"(?![\d])", doc):
            self.fail(msg or f"{figure!r} not in serve-h100.md")

    def test_results_in_the_document(self):
        paths = sorted(glob.glob(os.path.join(DOCS, "serve-h100-*.json")))
        self.assertGreaterEqual(len(paths), 2, "the H100 serving results are missing")
        with open(os.path.join(DOCS, "serve-h100.md")) as f:
            doc = f.read()
        for p in paths:
            with self.subTest(os.path.basename(p)):
                with open(p) as f:
                    r = json.load(f)
                self.assertEqual(r["schema"], "sfsurgery-serve/1")
                if p.endswith("-reference.json"):
                    # Cited for its comparison with the dense model in float32.
                    for v in r["reference"].values():
                        self.assertFigure(f"{v:.2e}", doc, "a float32 reference error")
                    continue
                if p.endswith("-sequential.json"):
                    # Cited for its speedups and its cuSPARSELt prefill.
                    for row in r["summary"][:2]:
                        self.assertFigure(f"{row['decode_speedup']:.2f}x", doc)
                    for b, t in r["cusparselt"]["ttft_s"].items():
                        self.assertFigure(f"{t * 1e3:.1f}", doc, f"cuSPARSELt ttft at batch {b}")
                    continue
                self.assertEqual(set(r["sparse_rows"]), set(r["dense_rows"]))
                for b, s in r["sparse_rows"].items():
                    d = r["dense_rows"][b]
                    for v in (s["decode_tok_s"], d["decode_tok_s"]):
                        self.assertFigure(f"{v:.1f}", doc, f"batch {b}: {v:.1f} tok/s not in serve-h100.md")
                    self.assertFigure(f"**{s['decode_tok_s'] / d['decode_tok_s']:.2f}x**", doc, f"batch {b}: speedup")
                ratio = r["sparse_projection_bytes"] / r["dense_projection_bytes"]
                self.assertLessEqual(ratio, 0.57)
                self.assertFigure(f"{ratio:.1%}", doc)


if __name__ == "__main__":
    unittest.main()
