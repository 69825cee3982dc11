"""bench/serve_table.py: the serving documents' tables from serve.py's
results (CPU only)."""

import contextlib
import copy
import glob
import importlib.util
import io
import json
import os
import tempfile
import unittest

from fixtures import REPO

_spec = importlib.util.spec_from_file_location("serve_table", os.path.join(REPO, "bench", "serve_table.py"))
serve_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_table)

DOCS = os.path.join(REPO, "docs")


def run(*argv):
    """Runs serve_table.main; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = serve_table.main(list(argv))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def measured(path_glob):
    """The committed results that a serving document tabulates (not the
    runs it cites for one comparison)."""
    return [p for p in sorted(glob.glob(path_glob)) if not p.endswith(("-reference.json", "-sequential.json"))]


class DocumentsTest(unittest.TestCase):
    def test_every_row_is_in_its_document(self):
        """Each committed serving document holds, verbatim, every table row
        rendered from its results: the tables are the script's output."""
        docs = sorted(glob.glob(os.path.join(DOCS, "serve-h*.md")))
        self.assertTrue(docs, "no serving documents")
        for doc_path in docs:
            gpu = os.path.basename(doc_path)[len("serve-"):-len(".md")]
            results = measured(os.path.join(DOCS, f"serve-{gpu}-*.json"))
            with self.subTest(gpu):
                self.assertTrue(results, f"no results for {doc_path}")
                with open(doc_path) as f:
                    doc = f.read()
                for p in results:
                    rows = [l for l in serve_table.table(serve_table.load(p)).splitlines() if l.startswith("|")]
                    self.assertGreater(len(rows), 2)
                    for line in rows:
                        self.assertIn(line, doc, f"{os.path.basename(p)}")


class TableTest(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(DOCS, "serve-h100-llama3-8b.json")) as f:
            self.result = json.load(f)
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, obj, name="r.json"):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
        return path

    def test_title_and_row(self):
        code, out, err = run(self.write(self.result), "--title", "Llama-3-8B shape, 32 layers")
        self.assertEqual((code, err), (0, ""))
        lines = out.splitlines()
        self.assertTrue(lines[0].startswith("Llama-3-8B shape, 32 layers (weights: dense 14.96 GiB, 2:4 9.27 GiB;"))
        self.assertIn("| 1 | 114.0 | 169.5 | **1.49x** | 0.65, 1.92x | 1.45x | 102% | 53.4 ms | 47.0 ms (1.14x) | "
                      "50.3 ms (1.06x) | 0.2, 0.2 GiB |", lines)

    def test_label_without_title(self):
        code, out, _ = run(self.write(self.result))
        self.assertEqual(code, 0)
        self.assertTrue(out.startswith("llama3-8b (weights:"))

    def test_batches_in_order_and_missing_alternative(self):
        r = copy.deepcopy(self.result)
        r["cusparselt"] = {"prefill": "cusparselt", "ttft_s": {"8": r["dense_rows"]["8"]["ttft_s"] / 2}}
        code, out, _ = run(self.write(r))
        self.assertEqual(code, 0)
        rows = [l for l in out.splitlines() if l.startswith("| ") and not l.startswith("| batch")]
        self.assertEqual([l.split(" | ")[0] for l in rows], ["| 1", "| 8", "| 32", "| 64"])
        self.assertIn("TTFT 2:4 (cuSPARSELt)", out)
        self.assertTrue(rows[0].endswith("| — | 0.2, 0.2 GiB |"), rows[0])
        self.assertIn("(2.00x) | 1.2, 1.3 GiB |", rows[1])

    def test_bad_input(self):
        other = copy.deepcopy(self.result)
        del other["dense_rows"]["64"]
        no_summary_row = copy.deepcopy(self.result)
        no_summary_row["summary"] = no_summary_row["summary"][:1]
        broken = copy.deepcopy(self.result)
        del broken["sparse_rows"]["1"]["ttft_s"]
        cases = [
            ("not json", "{", "r.json: "),
            ("other schema", {"schema": "sfsurgery-op-host/1"}, "not a sfsurgery-serve/1 result"),
            ("a list", [1, 2], "not a sfsurgery-serve/1 result"),
            ("no summary", {k: v for k, v in self.result.items() if k != "summary"}, "no 'summary'"),
            ("batches differ", other, "batches ['1', '8', '32', '64'] of the 2:4 model, ['1', '8', '32'] of dense"),
            ("no summary row", no_summary_row, "batch 8: no summary row"),
            ("a row without a figure", broken, "malformed result (KeyError"),
        ]
        for what, obj, want in cases:
            with self.subTest(what):
                code, out, err = run(self.write(obj))
                self.assertEqual(code, 2)
                self.assertEqual(out, "")
                self.assertIn(want, err)
                self.assertEqual(err.count("\n"), 1, err)
                self.assertTrue(err.startswith("serve_table.py: "), err)
        code, _, err = run(os.path.join(self.dir.name, "absent.json"))
        self.assertEqual(code, 2)
        self.assertIn("absent.json", err)

    def test_more_titles_than_results(self):
        code, out, err = run(self.write(self.result), "--title", "a", "--title", "b")
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err, "serve_table.py: 2 titles for 1 results\n")


if __name__ == "__main__":
    unittest.main()
