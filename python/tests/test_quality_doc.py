"""The quality document (bench/quality/render.py) from run.py's JSON: a
synthetic result's figures appear exactly, the committed document is the
rendering of the committed JSON, and run.py's standard-library helpers
(CPU only)."""

import copy
import io
import json
import os
import re
import sys
import tempfile
import unittest

from fixtures import REPO

sys.path.insert(0, os.path.join(REPO, "bench", "quality"))
import render  # noqa: E402
import run  # noqa: E402

DOC = os.path.join(REPO, "docs", "quality-h200.json")


def ppl_result(p, windows=1150, seqlen=1024, tps=912345.6, seconds=1.29, batch=16, fmt="dense"):
    import math

    return dict(schema="sfsurgery-perplexity/1", model="$WORK/x", format=fmt, text={"file": "heldout.txt", "sha256": "ab" * 32,
                "kind": "plain"}, text_tokens=1187654, seqlen=seqlen, windows=windows, batch=batch, tokens=windows * seqlen,
                predicted=windows * (seqlen - 1), nll=math.log(p), perplexity=p, seconds=seconds, tokens_per_s=tps,
                dtype="bfloat16", device="NVIDIA H200", command="python3 -m sfsurgery perplexity ...")


def synthetic():
    prompts = [dict(offset=1234 * (i + 1), prompt=f"def f{i}(x):\n", dense_tokens=list(range(32)), dense_text=f"    return {i}\n")
               for i in range(3)]
    greedy = [dict(dense_pruned_tokens=[], dense_pruned_text="    return y\n", ampere_tokens=[], ampere_text="    return y\n",
                   pruned_vs_dense=dict(same=7, first_divergence=3), ampere_vs_pruned=dict(same=32, first_divergence=None, gap=None)),
              dict(dense_pruned_tokens=[], dense_pruned_text="  pass", ampere_tokens=[], ampere_text="  pass ```",
                   pruned_vs_dense=dict(same=32, first_divergence=None), ampere_vs_pruned=dict(same=30, first_divergence=29, gap=0.0123)),
              dict(dense_pruned_tokens=[], dense_pruned_text="x", ampere_tokens=[], ampere_text="x",
                   pruned_vs_dense=dict(same=0, first_divergence=0), ampere_vs_pruned=dict(same=32, first_divergence=None, gap=None))]
    row = dict(method="magnitude", seed=None, calibration=None, kept_magnitude_fraction=0.81234, kept_magnitude_fraction_ampere=0.81234,
               dense_pruned=ppl_result(7.0464), ampere=ppl_result(7.0463, tps=987654.3, seconds=1.19, fmt="ampere"),
               served_vs_dense_pruned=(7.0463 - 7.0464) / 7.0464, greedy=greedy)
    model = dict(recipe=dict(name="full", hidden=768, intermediate=2048, layers=12, heads=12, kv_heads=4, max_positions=1024,
                             seqlen=1024, batch=64, betas=[0.9, 0.95], weight_decay=0.1, peak_lr=0.002, warmup=100,
                             final_lr_fraction=0.1),
                 seed=0, parameters=88099584, corpus=dict(bytes=300123456, files=31234, train_files=29672, heldout_files=1562,
                                                          train_tokens=88123456),
                 tokenizer=dict(vocab=8192, files=4000), steps=928, tokens_trained=60817408, epochs=0.6901, train_seconds=180.4,
                 final_loss=1.81234, seconds=dict(total=271.2), gpu="NVIDIA H200")
    return dict(schema=run.SCHEMA, command="SFSURGERY_BIN=... PYTHONPATH=python python3 bench/quality/run.py -o docs/quality-h200.json --work /tmp/q",
                seconds=399.7, env=dict(gpu="NVIDIA H200", driver="580.1", cuda="13.0", torch="2.11.0", transformers="5.17.0",
                                        tokenizers="0.23.2", python="3.12.3", sfsurgery="sfsurgery version 0.9"),
                seed=0, model=model, seqlen=1024, windows_asked=0,
                dense=dict(heldout=ppl_result(6.31), train=ppl_result(6.09, windows=1100)), rows=[row],
                greedy=dict(prompt_tokens=64, new_tokens=32, prompts=prompts),
                commands=["$SFSURGERY_BIN prune $WORK/testmodel/model -o $WORK/magnitude-dense --format dense --quiet"])


def throughput():
    return dict(shape="llama3-8b", layers=None, windows=128, seqlen=2048, batch=8, tokens=262144,
                dense=dict(eval_s=2.5, bare_s=2.47, eval_tokens_per_s=104857.6, bare_tokens_per_s=106131.2),
                ampere=dict(eval_s=2.0, bare_s=1.98, eval_tokens_per_s=131072.0, bare_tokens_per_s=132395.96),
                served_vs_dense=1.25, dense_eval_vs_bare=1.01214, ampere_eval_vs_bare=1.0101,
                commands=["$SFSURGERY_BIN synth --shape llama3-8b -o $DIR/dense"],
                command="SFSURGERY_BIN=... PYTHONPATH=python python3 bench/quality/throughput.py --model /tmp/q/testmodel --into docs/quality-h200.json")


class RenderTest(unittest.TestCase):
    def assertFigure(self, figure, doc):
        """figure stands in doc whole, not inside a longer number."""
        if not re.search(r"(?<![\d.])" + re.escape(figure) + r"(?![\d])", doc):
            self.fail(f"{figure!r} not in the document")

    def test_figures(self):
        md = render.render(synthetic(), "docs/quality-h200.json")
        for fig in ["6.3100", "6.0900", "7.0464", "7.0463", "-0.0014%", "+11.7%", "+3.6%", "0.8123", "88.1M", "8,192",
                    "300.1 MB", "31,234", "1,562", "928", "60.8M", "0.69", "180 s", "1.8123", "1,150", "1,187,654",
                    "912,346", "987,654", "1.29", "1.19", "16", "0.1%", "10%"]:
            self.assertFigure(fig, md)
        self.assertIn("# What 2:4 pruning costs: the test model on an NVIDIA H200", md)
        self.assertIn("| dense | 6.3100 |  |  |  |", md)
        self.assertIn("| magnitude 2:4, dense-pruned (transformers) | 7.0464 | +11.7% |  | 0.8123 |", md)
        self.assertIn("| magnitude 2:4, ampere (sfsurgery's kernels) | 7.0463 | +11.7% | -0.0014% | 0.8123 |", md)
        self.assertIn("| 1 (token 1,234) | 7 of 32 | 3 | 32 of 32 | none |", md)
        self.assertIn("| 2 (token 2,468) | 32 of 32 | none | 30 of 32 | 29 (gap 0.0123) |", md)
        self.assertIn("| 3 (token 3,702) | 0 of 32 | 0 | 32 of 32 | none |", md)
        self.assertIn("prompt 1:      'def f0(x):\\n'", md)
        self.assertIn("ampere:        '  pass ```'", md, "a continuation stays inside its code block")
        self.assertIn("python3 bench/quality/render.py docs/quality-h200.json > docs/quality-h200.md", md)
        self.assertIn("$SFSURGERY_BIN prune $WORK/testmodel/model -o $WORK/magnitude-dense --format dense --quiet", md)
        self.assertIn("| transformers | 5.17.0 |", md)
        self.assertNotIn("Llama-3-8B", md, "no throughput section without throughput figures")
        self.assertNotIn("either way", md, "one row")
        self.assertEqual(md.count("```"), 6 + 1, "three code blocks, and the fence inside a quoted continuation")

    def test_throughput(self):
        doc = synthetic()
        doc["throughput"] = throughput()
        md = render.render(doc, "docs/quality-h200.json")
        for fig in ["1.25x", "1.012", "1.010", "104,858", "106,131", "131,072", "132,396", "128", "2048"]:
            self.assertFigure(fig, md)
        self.assertIn("| evaluation time / bare loop time | 1.012 | 1.010 |", md)
        self.assertIn("throughput.py --model /tmp/q/testmodel --into docs/quality-h200.json", md)
        self.assertIn("$SFSURGERY_BIN synth --shape llama3-8b -o $DIR/dense", md)
        self.assertIn("On a Llama-3-8B-shaped checkpoint the served 2:4 model evaluates at 1.25x", md)

    def test_calibrated_rows(self):
        doc = synthetic()
        r = copy.deepcopy(doc["rows"][0])
        r.update(method="wanda", seed=3, calibration=dict(seconds=12.34, peak_gpu_bytes=3 * 2**30, samples=128, seqlen=1024),
                 served_vs_dense_pruned=2e-4)
        r["dense_pruned"] = ppl_result(6.95)
        doc["rows"].append(r)
        md = render.render(doc)
        self.assertIn("| wanda 2:4 (seed 3), dense-pruned (transformers) | 6.9500 | +10.1% |  | 0.8123 |", md)
        self.assertIn("| wanda | 6.9500 | 7.0463 | 6.9500 – 6.9500 (1 seed) | 0.0000 |  |  | 12.3 | 3.00 GiB |", md)
        self.assertIn("### wanda 2:4 (seed 3)", md)
        self.assertIn("over all rows at most 0.0200% either way", md)
        self.assertIn("calibration 3", md)

    def test_scale(self):
        doc = synthetic()
        cal = lambda s, load, peak: dict(seconds=s, load_seconds=load, compute_seconds=s - load, peak_gpu_bytes=peak,  # noqa: E731
                                         samples=128, seqlen=2048)
        doc["scale"] = dict(seqlen=2048, samples=128, command="SFSURGERY_BIN=... PYTHONPATH=python python3 bench/quality/scale.py --model M",
                            commands=["$SFSURGERY_BIN synth --shape llama3-8b -o $DIR/llama3-8b"],
                            times=dict(shape="llama3-8b", methods=dict(wanda=cal(31.25, 4.5, 6 * 2**30), sparsegpt=cal(150.5, 4.0, 9 * 2**30))),
                            depth=dict(shape="llama3-70b", method="wanda", samples=64,
                                       layers={"8": cal(40.0, 10.0, 12 * 2**30), "16": cal(79.0, 20.0, 12.25 * 2**30)},
                                       deepest_over_shallowest=12.25 / 12))
        md = render.render(doc)
        self.assertIn("| wanda | 31.2 | 4.5 | 26.8 | 45 | 6.00 GiB |", md)
        self.assertIn("| sparsegpt | 150.5 | 4.0 | 146.5 | 240 | 9.00 GiB |", md)
        self.assertIn("| 16 | 12.25 GiB | 79.0 |", md)
        self.assertIn("The deepest needs 1.021x the shallowest's peak (the bound: 1.10x).", md)
        self.assertIn("bench/quality/scale.py --model M", md)
        self.assertIn("A Llama-3-8B-shaped checkpoint", md)

    def test_train_split(self):
        doc = synthetic()
        doc["dense"]["train_split"] = ppl_result(6.0, windows=1111)
        md = render.render(doc)
        self.assertIn("The dense model on 1,100 windows of train.txt (the heads of files it trained on): 6.0900; held-out is "
                      "+3.6% from it (the bound for a model that is not overfit: 10%). On 1,111 windows of trainsplit.txt "
                      "(training files drawn as the held-out files are, whether or not training reached them): 6.0000, "
                      "held-out +5.2% from it.", md)
        del doc["dense"]["train_split"]
        self.assertNotIn("trainsplit", render.render(doc))

    def test_heads(self):
        doc = synthetic()
        self.assertIn("tokens of held-out files", render.render(doc))
        doc["model"]["recipe"]["file_bytes"] = 8192
        self.assertIn("1,187,654 tokens: the heads, up to 8 KiB of whole lines, of held-out files", render.render(doc))

    def test_pct(self):
        for x, want in [(-1.4191e-5, "-0.0014%"), (0.0, "+0.0000%"), (0.0099, "+0.9900%"), (0.01, "+1.0%"), (0.1167, "+11.7%"),
                        (-0.5, "-50.0%")]:
            self.assertEqual(render.pct(x), want)

    def test_main(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "q.json")
            with open(p, "w") as f:
                json.dump(synthetic(), f)
            import contextlib
            import io

            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(render.main([p]), 0)
            self.assertEqual(out.getvalue(), render.render(synthetic(), p))

    @unittest.skipUnless(os.path.exists(DOC), "no committed quality result")
    def test_committed_document(self):
        with open(DOC) as f:
            doc = json.load(f)
        self.assertEqual(doc["schema"], run.SCHEMA)
        with open(os.path.splitext(DOC)[0] + ".md") as f:
            self.assertEqual(f.read(), render.render(doc, "docs/quality-h200.json"),
                             "docs/quality-h200.md is not render.py's rendering of docs/quality-h200.json")


class RunFlowTest(unittest.TestCase):
    """run.py's main from a trained model to the JSON, with a stand-in
    sfsurgery binary (prune copies the model and writes a report), and
    perplexity, calibration, the reference and the greedy step faked: the
    rows, seeds, names and commands it records, and that render.py renders
    them."""

    PPL = {"model": 6.31, "magnitude-dense": 7.0464, "magnitude-ampere": 7.0463, "wanda-seed0-dense": 6.95,
           "wanda-seed0-ampere": 6.9501, "wanda-seed1-dense": 6.96, "sparsegpt-seed0-dense": 6.55,
           "sparsegpt-seed0-ampere": 6.5501, "sparsegpt-seed1-dense": 6.56}
    fail_calibration = False

    def setUp(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        self.dir = d.name
        self.model = os.path.join(self.dir, "testmodel")
        os.makedirs(os.path.join(self.model, "model"))
        with open(os.path.join(self.model, "model", "config.json"), "w") as f:
            json.dump({"model_type": "llama", "max_position_embeddings": 64}, f)
        for name in ("heldout.txt", "train.txt", "trainsplit.txt"):
            with open(os.path.join(self.model, name), "w") as f:
                f.write("x = 1\n")
        with open(os.path.join(self.model, "train.json"), "w") as f:
            json.dump(synthetic()["model"], f)
        self.bin = os.path.join(self.dir, "sfsurgery")
        with open(self.bin, "w") as f:
            f.write("#!/bin/sh\n"
                    'if [ "$1" = --version ]; then echo "sfsurgery version test"; exit 0; fi\n'
                    '[ "$1" = prune ] || exit 3\n'
                    'mkdir -p "$4" && cp "$2/config.json" "$4/" && '
                    'echo \'{"format": "\'"$6"\'", "kept_magnitude_fraction": 0.8125}\' > "$4/sfsurgery.json"\n')
        os.chmod(self.bin, 0o755)

    def measure(self, model, textfile, seqlen, windows, batch, tokens):
        self.assertEqual(seqlen, 64)
        name = os.path.basename(model)
        r = ppl_result(self.PPL[name] if "train.txt" not in textfile else 6.09, seqlen=64)
        r["model"] = model
        return r

    def calibrate(self, ns):
        if self.fail_calibration:
            from sfsurgery.errors import InputError

            raise InputError(f"{ns.text}: 2 tokens, fewer than the 128 × 64 = 8192 the samples need")
        with open(ns.output, "w") as f:
            f.write("decisions")
        return {"seconds": 12.5 + ns.seed, "peak_gpu_bytes": 2**30, "method": ns.method, "model": ns.model, "output": ns.output,
                "samples": ns.samples, "seqlen": 64}

    def reference(self, model, heldout, train, seqlen, row):
        row["reference"] = dict(perplexity=row["dense_pruned"]["perplexity"] * 0.999, seconds=3.0,
                                ours_over_reference=1 / 0.999, samples=128, seqlen=64, seed=row["seed"], command="...")

    def fake_greedy(self, model, heldout, rows):
        g = synthetic()
        for r in rows:
            r["greedy"] = g["rows"][0]["greedy"]
        return g["greedy"]

    def main(self, *extra):
        from unittest import mock

        from sfsurgery import perplexity
        from sfsurgery.calibrate import command

        out = os.path.join(self.dir, "q.json")
        work = os.path.join(self.dir, "work")
        argv = ["run.py", "-o", out, "--model", self.model, "--work", work] + list(extra)
        err = io.StringIO()
        with mock.patch.dict(os.environ, {"SFSURGERY_BIN": self.bin}), mock.patch.object(sys, "argv", argv), \
                mock.patch.object(perplexity, "measure", self.measure), mock.patch.object(command, "calibrate", self.calibrate), \
                mock.patch.object(run.Quality, "reference", lambda q, *a: self.reference(*a)), \
                mock.patch.object(run.Quality, "greedy", self.fake_greedy), \
                mock.patch.object(run, "environment", lambda b: dict(gpu="NVIDIA H200", sfsurgery="test")), \
                mock.patch("sys.stderr", new=err):
            code = run.main()
        return code, out, work, err.getvalue()

    def test_main(self):
        code, out, work, _ = self.main()
        self.assertEqual(code, 0)
        with open(out) as f:
            doc = json.load(f)
        self.assertFalse(os.path.exists(out + ".partial"))
        self.assertEqual((doc["schema"], doc["seqlen"], doc["seed"]), (run.SCHEMA, 64, 0))
        self.assertEqual(doc["command"], "SFSURGERY_BIN=... PYTHONPATH=python python3 bench/quality/run.py -o "
                                         f"{out} --model {self.model} --work {work}")
        self.assertEqual([(r["method"], r["seed"]) for r in doc["rows"]], [("magnitude", None)])
        row = doc["rows"][0]
        self.assertEqual((row["dense_pruned"]["perplexity"], row["ampere"]["perplexity"], row["kept_magnitude_fraction"]),
                         (7.0464, 7.0463, 0.8125))
        self.assertAlmostEqual(row["served_vs_dense_pruned"], -1.4191e-5, places=8)
        self.assertNotIn("dirs", row)
        self.assertEqual((doc["dense"]["train"]["perplexity"], doc["dense"]["train_split"]["perplexity"]), (6.09, 6.31))
        self.assertIn("$SFSURGERY_BIN prune " + self.model + "/model -o $WORK/magnitude-ampere --format ampere --quiet --force",
                      doc["commands"])
        self.assertIn("python3 -m sfsurgery perplexity $WORK/magnitude-ampere --text " + self.model + "/heldout.txt --seqlen 64 --json",
                      doc["commands"])
        self.assertEqual(row["ampere"]["model"], "$WORK/magnitude-ampere")
        md = render.render(doc, out)
        self.assertIn("| magnitude 2:4, ampere (sfsurgery's kernels) | 7.0463 | +11.7% | -0.0014% | 0.8125 |", md)
        self.assertNotIn("## Calibrated methods", md)

    def test_calibrated_rows(self):
        code, out, work, _ = self.main("--methods", "magnitude,wanda,sparsegpt", "--seeds", "0,1")
        self.assertEqual(code, 0)
        with open(out) as f:
            doc = json.load(f)
        self.assertEqual([(r["method"], r["seed"]) for r in doc["rows"]], [("magnitude", None), ("wanda", 0), ("sparsegpt", 0)])
        w = doc["rows"][1]
        self.assertEqual((w["calibration"]["seconds"], w["calibration"]["peak_gpu_bytes"]), (12.5, 2**30))
        self.assertEqual(w["calibration"]["command"], "python3 -m sfsurgery calibrate " + self.model + "/model --method wanda --text "
                         + self.model + "/train.txt --samples 128 --seed 0 --force --json -o $WORK/decisions-wanda-seed0.safetensors")
        self.assertEqual([(s["seed"], s["perplexity"], s["seconds"]) for s in w["seeds"]], [(0, 6.95, 12.5), (1, 6.96, 13.5)])
        self.assertEqual((w["dense_pruned"]["perplexity"], w["ampere"]["perplexity"]), (6.95, 6.9501))
        self.assertIn(f"$SFSURGERY_BIN prune {self.model}/model -o $WORK/wanda-seed0-ampere --format ampere --quiet --force "
                      "--decisions $WORK/decisions-wanda-seed0.safetensors", doc["commands"])
        self.assertIn(f"$SFSURGERY_BIN prune {self.model}/model -o $WORK/sparsegpt-seed1-dense --format dense --quiet --force "
                      "--decisions $WORK/decisions-sparsegpt-seed1.safetensors", doc["commands"])
        self.assertNotIn("-seed1-ampere", " ".join(doc["commands"]))
        self.assertFalse(os.path.exists(os.path.join(work, "decisions-wanda-seed1.safetensors")))
        md = render.render(doc, out)
        self.assertIn("| wanda 2:4 (seed 0), ampere (sfsurgery's kernels) | 6.9501 | +10.1% | +0.0014% | 0.8125 |", md)
        self.assertIn("| wanda | 6.9500 | 6.9501 | 6.9500 – 6.9600 (2 seeds) | 0.0100 | 6.9431 | 1.0010 | 12.5 | 1.00 GiB |", md)
        self.assertIn("| sparsegpt < wanda | 6.5550 < 6.9550 | 0.4000 | 0.0100 | yes |", md)
        self.assertIn("| wanda < magnitude | 6.9550 < 7.0464 | 0.0914 | 0.0100 | yes |", md)
        self.assertIn("SparseGPT raises held-out perplexity by 0.2450 over dense, 0.33x magnitude's 0.7364", md)
        self.assertIn("| seeds | training and prompts 0; calibration 0, 1 |", md)

    def test_failure_is_one_line(self):
        self.fail_calibration = True
        code, out, work, err = self.main("--methods", "magnitude,wanda")
        self.assertEqual(code, 2)
        self.assertRegex(err.splitlines()[-1], r"^run.py: .*train.txt: 2 tokens, fewer than the 128 × 64 = 8192 the samples need "
                                               r"\(work directory .*/work\)$")
        self.assertFalse(os.path.exists(out))
        with open(out + ".partial") as f:
            partial = json.load(f)
        self.assertEqual([r["method"] for r in partial["rows"]], ["magnitude"], "the rows done before the failure are kept")


class RunHelpersTest(unittest.TestCase):
    def test_compare(self):
        for a, b, want in [
            ([1, 2, 3], [1, 2, 3], dict(same=3, first_divergence=None)),
            ([1, 2, 3], [1, 5, 3], dict(same=2, first_divergence=1)),
            ([9, 2, 3], [1, 2, 3], dict(same=2, first_divergence=0)),
            ([1, 2], [1, 2, 3], dict(same=2, first_divergence=2)),
            ([], [], dict(same=0, first_divergence=None)),
        ]:
            self.assertEqual(run.compare(a, b), want, (a, b))

    def test_kept_fraction(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "sfsurgery.json"), "w") as f:
                json.dump({"format": "dense", "kept_magnitude_fraction": 0.8125, "tensors": []}, f)
            self.assertEqual(run.kept_fraction(d), 0.8125)
            with open(os.path.join(d, "sfsurgery.json"), "w") as f:
                json.dump({"format": "dense"}, f)
            with self.assertRaisesRegex(run.Failure, "no kept_magnitude_fraction"):
                run.kept_fraction(d)
            with self.assertRaisesRegex(run.Failure, "sfsurgery.json: no kept_magnitude_fraction"):
                run.kept_fraction(os.path.join(d, "nope"))

    def test_keep(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "q.json")
            doc = dict(rows=[1])
            run.keep(out, doc)  # no earlier document
            self.assertEqual(doc, dict(rows=[1]))
            with open(out, "w") as f:
                json.dump(dict(rows=[0], dense=0, throughput=dict(a=1), scale=dict(b=2)), f)
            run.keep(out, doc)
            self.assertEqual(doc, dict(rows=[1], throughput=dict(a=1), scale=dict(b=2)))
            doc = dict(throughput=dict(a=9))
            run.keep(out, doc)  # a section of this run's own wins
            self.assertEqual(doc, dict(throughput=dict(a=9), scale=dict(b=2)))
            with open(out, "w") as f:
                f.write("[1, 2")
            doc = dict(rows=[1])
            run.keep(out, doc)
            self.assertEqual(doc, dict(rows=[1]))

    def test_row_name(self):
        self.assertEqual((run.row_name("magnitude", None), run.row_name("wanda", 2)), ("magnitude", "wanda-seed2"))
        self.assertAlmostEqual(run.rel_diff(7.0463, 7.0464), -1.4191e-5, places=8)


if __name__ == "__main__":
    unittest.main()
