"""bench/serve_table.py: the serving documents' tables from serve.py's
results (CPU only)."""

import contextlib
import copy
import glob
import importlib.util
import io
import json
import os
import re
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


# A table's batch row: "| 8 | ...".
BATCH_ROW = re.compile(r"^\| \d+ \|")


class DocumentsTest(unittest.TestCase):
    def test_documents_are_the_tables(self):
        """The batch rows of each committed serving document are exactly
        the rows the script renders from its results (none missing, none
        extra), and each table's weights line is the script's."""
        docs = sorted(glob.glob(os.path.join(DOCS, "serve-h*.md")))
        self.assertTrue(docs, "no serving documents")
        for doc_path in docs:
            gpu = os.path.basename(doc_path)[len("serve-"):-len(".md")]
            results = measured(os.path.join(DOCS, f"serve-{gpu}-*.json"))
            with self.subTest(gpu):
                self.assertTrue(results, f"no results for {doc_path}")
                with open(doc_path) as f:
                    doc = f.read()
                flat = " ".join(doc.split())
                rendered = []
                for path in results:
                    lines = serve_table.table(serve_table.load(path)).splitlines()
                    rendered += [line for line in lines if BATCH_ROW.match(line)]
                    weights = lines[0][lines[0].index("(weights:"):]
                    self.assertIn(weights, flat, os.path.basename(path))
                in_doc = [line for line in doc.splitlines() if BATCH_ROW.match(line)]
                self.assertGreater(len(rendered), 0)
                self.assertEqual(sorted(in_doc), sorted(rendered))


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

    def test_prefill_paths(self):
        """The model's own prefill path names its column (none named where
        the result does not say), and an alternative that is the same
        path gets no second column; a result without working memory
        shows a dash there."""
        r = copy.deepcopy(self.result)
        del r["sparse_prefill"]
        for b in r["sparse_rows"]:
            del r["sparse_rows"][b]["work_bytes"]
        code, out, _ = run(self.write(r))
        self.assertEqual(code, 0)
        self.assertIn("| TTFT dense | TTFT 2:4 | TTFT 2:4 (decode to dense) | working memory dense, 2:4 |", out)
        self.assertIn("| 53.4 ms | 47.0 ms (1.14x) | 50.3 ms (1.06x) | — |", out)
        r = copy.deepcopy(self.result)
        r["sparse_prefill"] = "decode"
        code, out, _ = run(self.write(r))
        self.assertEqual(code, 0)
        self.assertEqual(out.count("decode to dense"), 1, out)
        self.assertIn("| TTFT dense | TTFT 2:4 (decode to dense) | working memory dense, 2:4 |", out)

    def test_ttft_medians(self):
        """Where every batch of both models keeps its one-token calls, the
        table gives their medians and the medians' ratio; where one batch
        does not, no such column."""
        r = copy.deepcopy(self.result)
        for model, runs in (("dense_rows", [[0.05, 0.07], [0.06]]), ("sparse_rows", [[0.04, 0.03, 0.05], [0.01]])):
            for b in r[model]:
                r[model][b]["visits"] = [{"ttft_runs_s": v} for v in runs]
        code, out, _ = run(self.write(r))
        self.assertEqual(code, 0)
        self.assertIn("| TTFT median of the calls, dense and 2:4 | working memory dense, 2:4 |", out)
        # dense median of 0.05, 0.07, 0.06; 2:4 median of 0.04, 0.03, 0.05, 0.01
        self.assertIn("| 60.0, 35.0 ms (1.71x) | 0.2, 0.2 GiB |", out)
        del r["sparse_rows"]["64"]["visits"][0]["ttft_runs_s"]
        r["sparse_rows"]["64"]["visits"][1]["ttft_runs_s"] = []
        code, out, _ = run(self.write(r))
        self.assertEqual(code, 0)
        self.assertNotIn("median", out)

    def test_bad_input(self):
        other = copy.deepcopy(self.result)
        del other["dense_rows"]["64"]
        no_summary_row = copy.deepcopy(self.result)
        no_summary_row["summary"] = no_summary_row["summary"][:1]
        broken = copy.deepcopy(self.result)
        del broken["sparse_rows"]["1"]["ttft_s"]
        text = copy.deepcopy(self.result)
        text["sparse_rows"]["1"]["decode_tok_s"] = "169.5"
        listed = copy.deepcopy(self.result)
        listed["decode_prefill"]["ttft_s"] = [0.05]
        cases = [
            ("not json", "{", "r.json: "),
            ("other schema", {"schema": "sfsurgery-op-host/1"}, "not a sfsurgery-serve/1 result"),
            ("a list", [1, 2], "not a sfsurgery-serve/1 result"),
            ("no summary", {k: v for k, v in self.result.items() if k != "summary"}, "no 'summary'"),
            ("batches differ", other, "batches ['1', '8', '32', '64'] of the 2:4 model, ['1', '8', '32'] of dense"),
            ("no summary row", no_summary_row, "r.json: batch 8: no summary row"),
            ("a row without a figure", broken, "r.json: malformed result (KeyError"),
            ("a figure as text", text, "r.json: malformed result (ValueError"),
            ("times as a list", listed, "r.json: malformed result (AttributeError"),
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


class SummaryTest(unittest.TestCase):
    def test_known_answer(self):
        """Projections 4 ms of a 10 ms dense step (share 0.4), 2x faster:
        bound 1 / (0.6 + 0.2) = 1.25x; decode 120 against 100 tok/s, 96%
        of it; first token 40 against 50 ms (1.25x), the calls' medians 45
        against 60 ms; decode to dense 62.5 ms (0.8x)."""
        s = dict(projections_s=0.002, step_s=0.009, decode_tok_s=120.0, ttft_s=0.040,
                 visits=[dict(ttft_runs_s=[0.040, 0.045, 0.050])])
        d = dict(projections_s=0.004, step_s=0.010, decode_tok_s=100.0, ttft_s=0.050,
                 visits=[dict(ttft_runs_s=[0.070, 0.050]), dict(ttft_runs_s=[0.060])])
        row = serve_table.summary_row(8, s, d, {"decode_prefill": {"ttft_s": {8: 0.0625}}, "cusparselt": {"ttft_s": {1: 0.01}}})
        want = dict(batch=8, share=0.4, projection_speedup=2.0, amdahl=1.25, decode_speedup=1.2, of_bound=0.96,
                    ttft_ratio=1.25, ttft_median_ratio=60 / 45, ttft_ratio_decode_prefill=0.8)
        self.assertEqual(set(row), set(want))
        for k, v in want.items():
            self.assertAlmostEqual(row[k], v, places=12, msg=k)
        del s["visits"]
        self.assertNotIn("ttft_median_ratio", serve_table.summary_row(8, s, d, {}))

    def test_committed_summaries(self):
        """Every figure of a committed result's summary is summary_row's
        from its rows (the JSON's batch keys are strings; results of
        earlier serve.py versions lack the figures added since)."""
        paths = sorted(glob.glob(os.path.join(DOCS, "serve-h*.json")))
        self.assertTrue(paths)
        for path in paths:
            with open(path) as f:
                r = json.load(f)
            alts = {k: r[k] for k in serve_table.ALTERNATIVES if isinstance(r.get(k), dict) and "ttft_s" in r[k]}
            for want in r["summary"]:
                b = str(want["batch"])
                with self.subTest(path=os.path.basename(path), batch=b):
                    got = serve_table.summary_row(want["batch"], r["sparse_rows"][b], r["dense_rows"][b],
                                                  {k: {"ttft_s": {want["batch"]: v["ttft_s"].get(b)}} for k, v in alts.items()})
                    self.assertLessEqual(set(want), set(got))
                    for k, v in want.items():
                        self.assertAlmostEqual(got[k], v, places=9, msg=k)


class WriteTest(unittest.TestCase):
    def test_replaces_whole(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "serve.json")
            serve_table.write(path, {"summary": [1]})
            serve_table.write(path, {"summary": [1, 2]})
            with open(path) as f:
                self.assertEqual(json.load(f), {"summary": [1, 2]})
            self.assertEqual(os.listdir(tmp), ["serve.json"])
            plain = os.path.join(tmp, "plain")
            with open(plain, "w"):
                pass
            self.assertEqual(os.stat(path).st_mode & 0o777, os.stat(plain).st_mode & 0o777, "the umask's mode")

    def test_partial_result_renders(self):
        """What serve.py writes after its first batch (rows, summary, no
        logits check yet) loads and renders as a one-row table."""
        with open(os.path.join(DOCS, "serve-h200-llama3-8b.json")) as f:
            whole = json.load(f)
        partial = {k: v for k, v in whole.items() if k not in ("logits_rel_error", "greedy_same_tokens",
                                                             "greedy_gap_at_parting", "decode_prefill", "summary")}
        partial["sparse_rows"], partial["dense_rows"] = {"1": whole["sparse_rows"]["1"]}, {"1": whole["dense_rows"]["1"]}
        partial["summary"] = [whole["summary"][0]]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "serve.json")
            serve_table.write(path, partial)
            rows = [line for line in serve_table.table(serve_table.load(path)).splitlines() if BATCH_ROW.match(line)]
        s, d = whole["sparse_rows"]["1"], whole["dense_rows"]["1"]
        self.assertEqual(len(rows), 1)
        want = f"| 1 | {d['decode_tok_s']:.1f} | {s['decode_tok_s']:.1f} | **{whole['summary'][0]['decode_speedup']:.2f}x** |"
        self.assertTrue(rows[0].startswith(want), (rows[0], want))

    def test_failure_keeps_the_old_result(self):
        """A result json cannot write leaves the previous file as it was
        and no temporary file beside it."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "serve.json")
            serve_table.write(path, {"summary": [1]})
            with self.assertRaises(TypeError):
                serve_table.write(path, {"summary": [object()]})
            with open(path) as f:
                self.assertEqual(json.load(f), {"summary": [1]})
            self.assertEqual(os.listdir(tmp), ["serve.json"])


if __name__ == "__main__":
    unittest.main()
