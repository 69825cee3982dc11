"""`python -m sfsurgery perplexity`: its arguments and every refusal in one
line (CPU, in CI), its arithmetic against a slow float64 reference (torch
on the CPU), the refusals that need transformers, and on a GPU a trained
test model (bench/quality/train.py --quick) whose ampere output served by
our kernels scores the perplexity of its dense-pruned output."""

import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

from fixtures import REPO, TINY, sfsurgery_bin
from sfsurgery import cli, layout, perplexity
from sfsurgery.errors import CheckpointError, InputError

try:
    import torch
except ImportError:
    torch = None
try:
    import transformers  # noqa: F401
    import tokenizers  # noqa: F401
except ImportError:
    transformers = None

PYTHON = os.path.join(REPO, "python")
NO_TORCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "no-torch")
HF = torch is not None and transformers is not None
GPU = HF and torch.cuda.is_available()


def run_cli(*argv):
    """cli.main in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(data)
    return path


def assertOneLine(test, err, want):
    """err ends with the one line `sfsurgery: …want…` and holds no other
    of ours (libraries may log before it)."""
    lines = err.splitlines()
    test.assertTrue(lines, "nothing on stderr")
    test.assertRegex(lines[-1], r"^sfsurgery: .*" + want)
    test.assertEqual(sum(ln.startswith("sfsurgery:") for ln in lines), 1, err)
    test.assertTrue(err.endswith("\n"))


class Scratch(unittest.TestCase):
    def setUp(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        self.dir = d.name
        self.text = write(os.path.join(self.dir, "t.txt"), "def f(x):\n    return x\n" * 50)

    def model_dir(self, config, tokenizer=True, name="m"):
        """A model directory with config.json (and a tokenizer.json)."""
        p = os.path.join(self.dir, name)
        write(os.path.join(p, "config.json"), json.dumps(config))
        if tokenizer:
            write(os.path.join(p, "tokenizer.json"), "{}")
        return p

    def assertRefused(self, argv, want):
        code, out, err = run_cli("perplexity", *argv)
        self.assertEqual(code, 2, err)
        self.assertEqual(out, "")
        assertOneLine(self, err, want)


class ArgsTest(Scratch):
    def test_defaults(self):
        a = cli.build_parser().parse_args(["perplexity", "org/name", "--text", "t.txt"])
        self.assertEqual((a.model, a.text, a.seqlen, a.windows, a.batch, a.json), ("org/name", "t.txt", None, 0, None, False))
        a = cli.build_parser().parse_args(["perplexity", "m", "--text", "t", "--seqlen", "512", "--windows", "64",
                                           "--batch", "4", "--json"])
        self.assertEqual((a.seqlen, a.windows, a.batch, a.json), (512, 64, 4, True))

    def test_out_of_range(self):
        for argv, want in [
            (["--seqlen", "1"], "--seqlen 1: want at least 2"),
            (["--seqlen", "0"], "--seqlen 0"),
            (["--windows", "-1"], r"--windows -1: want 0 \(all\) or more"),
            (["--batch", "0"], "--batch 0: want at least 1"),
        ]:
            with self.subTest(argv=argv):
                self.assertRefused([TINY, "--text", self.text] + argv, want)

    def test_text_refusals(self):
        empty = write(os.path.join(self.dir, "empty.txt"), " \n")
        self.assertRefused([TINY, "--text", os.path.join(self.dir, "nope.txt")], r"nope\.txt: No such file or directory")
        self.assertRefused([TINY, "--text", empty], r"empty\.txt: empty text")

    def test_model_refusals(self):
        self.assertRefused([os.path.join(self.dir, "nope"), "--text", self.text], r"nope: no such file or directory")
        self.assertRefused([self.text, "--text", self.text], r"t\.txt: a file; want a model directory")
        with mock.patch.dict(os.environ, {"HF_HUB_CACHE": os.path.join(self.dir, "cache")}):
            self.assertRefused(["org/model", "--text", self.text], r"model org/model is not in the Hugging Face cache")
        self.assertRefused([TINY, "--text", self.text], r"tiny-llama-bf16: no tokenizer \(none of tokenizer\.json")
        self.assertRefused([self.dir, "--text", self.text], r"config\.json: No such file or directory")

    def test_without_torch(self):
        """Every check that needs no torch passes, then the command says
        what it needs (run with a stand-in torch that refuses to import)."""
        m = self.model_dir({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
        e = dict(os.environ, PYTHONPATH=os.pathsep.join([NO_TORCH, PYTHON]))
        r = subprocess.run([sys.executable, "-m", "sfsurgery", "perplexity", m, "--text", self.text],
                           capture_output=True, text=True, env=e, timeout=300)
        self.assertEqual(r.returncode, 2, r.stderr)
        assertOneLine(self, r.stderr, r"perplexity needs torch and transformers 5 ")


class ModelDirectoryTest(Scratch):
    """MODEL is a directory, or a hub id the sfsurgery binary resolves in
    the local cache (layout.model_directory)."""

    def test_directory(self):
        self.assertEqual(layout.model_directory(self.dir), self.dir)

    def test_hub_id(self):
        commit = "a" * 40
        c = os.path.join(self.dir, "hub")
        snap = os.path.join(c, "models--org--name", "snapshots", commit)
        shutil.copytree(TINY, snap)
        write(os.path.join(c, "models--org--name", "refs", "main"), commit)
        with mock.patch.dict(os.environ, {"HF_HUB_CACHE": c, "SFSURGERY_BIN": sfsurgery_bin()}):
            self.assertEqual(layout.model_directory("org/name"), snap)
            self.assertEqual(layout.model_directory(f"org/name@{commit}"), snap)
            with self.assertRaisesRegex(CheckpointError, r"model org/other is not in the Hugging Face cache at .*hub"):
                layout.model_directory("org/other")

    def test_refused(self):
        with self.assertRaisesRegex(CheckpointError, r"t\.txt: a file; want a model directory"):
            layout.model_directory(self.text)
        with mock.patch.dict(os.environ, {"SFSURGERY_BIN": sfsurgery_bin()}):
            with self.assertRaisesRegex(CheckpointError, r"nope: no such file or directory"):
                layout.model_directory(os.path.join(self.dir, "nope"))


class ConfigTest(Scratch):
    CAUSAL = {"llama": "LlamaForCausalLM", "bert": "BertLMHeadModel", "multi": ("AForCausalLM", "AThing")}

    def test_causal(self):
        for cfg in [
            {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
            {"model_type": "llama"},
            {"model_type": "llama", "architectures": []},
            {"model_type": "bert", "architectures": ["BertLMHeadModel"]},
            {"model_type": "multi", "architectures": ["AThing"]},
            {"model_type": "llama", "architectures": ["MyLlamaForCausalLM"]},
        ]:
            with self.subTest(cfg=cfg):
                perplexity.check_causal(cfg, self.CAUSAL, "c.json")

    def test_not_causal(self):
        for cfg, want in [
            ({}, r"c\.json: no model_type"),
            ({"model_type": "vit", "architectures": ["ViTModel"]}, r"c\.json: model type 'vit' is not a causal LM"),
            ({"model_type": "bert", "architectures": ["BertForMaskedLM"]},
             r"c\.json: architectures \['BertForMaskedLM'\] name no causal LM \(for 'bert': BertLMHeadModel\)"),
        ]:
            with self.subTest(cfg=cfg), self.assertRaisesRegex(CheckpointError, want):
                perplexity.check_causal(cfg, self.CAUSAL, "c.json")

    def test_is_ampere(self):
        self.assertTrue(perplexity.is_ampere({"quantization_config": {"quant_method": "sfsurgery", "format": "ampere"}}))
        for cfg in ({}, {"quantization_config": {"quant_method": "compressed-tensors"}}, {"quantization_config": "x"}):
            self.assertFalse(perplexity.is_ampere(cfg))

    def test_tokenizer_files(self):
        self.assertEqual(perplexity.find_tokenizer(self.model_dir({})), "tokenizer.json")
        m = self.model_dir({}, tokenizer=False, name="sp")
        write(os.path.join(m, "tokenizer.model"), "x")
        self.assertEqual(perplexity.find_tokenizer(m), "tokenizer.model")
        with self.assertRaisesRegex(InputError, r"tiny-llama-bf16: no tokenizer"):
            perplexity.find_tokenizer(TINY)

    def test_seqlen(self):
        for asked, maxpos, want in [(None, 1024, 1024), (None, 8192, 2048), (None, None, 2048), (512, 1024, 512),
                                    (1024, 1024, 1024), (4096, None, 4096)]:
            self.assertEqual(perplexity.choose_seqlen(asked, maxpos, "c.json"), want, (asked, maxpos))
        with self.assertRaisesRegex(InputError, r"--seqlen 2048: above the model's max_position_embeddings 1024 \(c\.json\)"):
            perplexity.choose_seqlen(2048, 1024, "c.json")

    def test_batch(self):
        for args, want in [
            ((None, 1000, 1024, 8192), 16),  # 16384 tokens' worth
            ((None, 1000, 2048, 128256), 8),  # logits 8 × 2048 × 128256 × 2 B < 4 GiB
            ((None, 1000, 4096, 128256), 4),
            ((None, 1000, 2048, 128256, 4), 4),  # float32 logits
            ((None, 1000, 8192, 256000), 1),  # past the budget at 1: still 1
            ((None, 3, 1024, 8192), 3),
            ((5, 3, 1024, 8192), 3),
            ((5, 100, 1024, 8192), 5),
        ]:
            self.assertEqual(perplexity.choose_batch(*args), want, args)
        self.assertEqual(perplexity.ce_chunk_rows(128256), (1 << 30) // (4 * 128256))
        self.assertEqual(perplexity.ce_chunk_rows(1 << 40), 1)


class ResultTest(unittest.TestCase):
    def test_result(self):
        text = {"file": "heldout.txt", "sha256": "ab" * 32, "kind": "plain"}
        r = perplexity.result("org/m", "ampere", text, 70000, 1024, 64, 16, nll_sum=64 * 1023 * 1.84, seconds=2.0,
                              dtype="bfloat16", device="NVIDIA H200")
        self.assertEqual(r["schema"], perplexity.SCHEMA)
        self.assertEqual((r["model"], r["format"], r["text"], r["text_tokens"]), ("org/m", "ampere", text, 70000))
        self.assertEqual((r["seqlen"], r["windows"], r["batch"], r["tokens"], r["predicted"]), (1024, 64, 16, 65536, 64 * 1023))
        self.assertAlmostEqual(r["nll"], 1.84, places=12)
        self.assertAlmostEqual(r["perplexity"], math.exp(1.84), places=10)
        self.assertEqual((r["seconds"], r["tokens_per_s"]), (2.0, 32768.0))
        self.assertEqual((r["dtype"], r["device"]), ("bfloat16", "NVIDIA H200"))
        self.assertEqual(json.loads(json.dumps(r)), r)
        self.assertEqual(perplexity.summary(r), f"org/m: perplexity {math.exp(1.84):.4f} (NLL 1.84000) over 64 windows of "
                                                "1024 tokens of heldout.txt; 32,768 tokens/s (bfloat16, NVIDIA H200)")
        self.assertIsNone(perplexity.result("m", "dense", text, 10, 5, 2, 1, 1.0, 0.0, "f32", "cpu")["tokens_per_s"])


@unittest.skipUnless(torch is not None, "needs torch")
class ArithmeticTest(unittest.TestCase):
    """nll_sum and evaluate against a float64 reference, on a bigram model
    whose logits are a table lookup (bf16, as a model's)."""

    class Bigram(torch.nn.Module if torch is not None else object):
        def __init__(self, vocab, seed):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=g) * 3)
            self.calls = []

        def forward(self, input_ids, use_cache=None):
            self.calls.append(tuple(input_ids.shape))
            return types.SimpleNamespace(logits=self.table[input_ids].to(torch.bfloat16))

    def reference(self, model, ids):
        total = 0.0
        logp = torch.log_softmax(model.table.detach().to(torch.bfloat16).double(), dim=-1)
        for w in ids.tolist():
            for t in range(len(w) - 1):
                total -= logp[w[t], w[t + 1]].item()
        return total

    def test_evaluate(self):
        vocab, seqlen, windows = 50, 13, 7
        model = self.Bigram(vocab, 1)
        ids = torch.randint(0, vocab, (windows, seqlen), generator=torch.Generator().manual_seed(2))
        want = self.reference(model, ids)
        got = {}
        for chunk_bytes in (600, 1 << 30):  # 3 positions at a time, or a whole window
            with mock.patch.object(perplexity, "CE_CHUNK_BYTES", chunk_bytes):
                for batch in (1, 2, 5, 7):
                    model.calls.clear()
                    s, seconds = perplexity.evaluate(model, ids, batch)
                    self.assertEqual([c[0] for c in model.calls], [min(batch, windows - i) for i in range(0, windows, batch)])
                    self.assertLess(abs(s - want) / want, 1e-6, (chunk_bytes, batch))
                    self.assertGreaterEqual(seconds, 0)
                    got[(chunk_bytes, batch)] = s
        for c in (600, 1 << 30):
            self.assertEqual(len({v for k, v in got.items() if k[0] == c}), 1, "the batch changes the sum")

    def test_nll_sum_float32(self):
        """Logits too large for bf16's log-softmax to be exact are scored in float32."""
        logits = torch.tensor([[[1000.0, 990.0, 0.0], [0.0, 0.5, 0.25], [0.0, 0.0, 0.0]]]).to(torch.bfloat16)
        ids = torch.tensor([[0, 1, 2]])
        out = torch.zeros((), dtype=torch.float64)
        perplexity.nll_sum(logits, ids, 1, out)
        l64 = logits.double()
        want = -(torch.log_softmax(l64[0, 0], -1)[1] + torch.log_softmax(l64[0, 1], -1)[2]).item()
        self.assertAlmostEqual(out.item(), want, places=4)


@unittest.skipUnless(HF, "needs torch and transformers")
class TransformersRefusalTest(Scratch):
    """The refusals that read the model through transformers."""

    def test_not_a_causal_lm(self):
        m = self.model_dir({"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 64})
        self.assertRefused([m, "--text", self.text], r"architectures \['BertForMaskedLM'\] name no causal LM")
        m = self.model_dir({"model_type": "vit", "architectures": ["ViTModel"]}, name="vit")
        self.assertRefused([m, "--text", self.text], r"model type 'vit' is not a causal LM")

    def test_seqlen_too_long(self):
        m = os.path.join(self.dir, "tiny")
        shutil.copytree(TINY, m)
        write(os.path.join(m, "tokenizer.json"), "{}")
        self.assertRefused([m, "--text", self.text, "--seqlen", "512"],
                           r"--seqlen 512: above the model's max_position_embeddings 256 \(.*tiny/config\.json\)")

    def test_broken_tokenizer(self):
        m = os.path.join(self.dir, "tiny")
        shutil.copytree(TINY, m)
        write(os.path.join(m, "tokenizer.json"), "{not json")
        self.assertRefused([m, "--text", self.text, "--seqlen", "64"], r"tiny: cannot load its tokenizer")


TRAIN = os.path.join(REPO, "bench", "quality", "train.py")


@unittest.skipUnless(GPU, "needs torch, transformers and a CUDA GPU")
class TrainedModelTest(unittest.TestCase):
    """A test model (bench/quality/train.py's output: $SFSURGERY_QUALITY_MODEL
    names its model/ directory, else the quick variant is trained here),
    pruned by the sfsurgery binary: its ampere output served by our kernels
    has the perplexity of its dense-pruned output within 0.1%, and pruning
    raises the dense model's."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sfsurgery-quality-")
        given = os.environ.get("SFSURGERY_QUALITY_MODEL")
        if given:
            cls.out = os.path.dirname(os.path.abspath(given))
        else:
            cls.out = os.path.join(cls.tmp, "quick")
            env = dict(os.environ, PYTHONPATH=PYTHON)
            subprocess.run([sys.executable, TRAIN, "--quick", "-o", cls.out], check=True, env=env, timeout=600)
        cls.model = os.path.join(cls.out, "model")
        with open(os.path.join(cls.model, "config.json")) as f:
            cls.positions = json.load(f)["max_position_embeddings"]
        cls.pruned = {}
        for fmt in ("dense", "ampere"):
            cls.pruned[fmt] = os.path.join(cls.tmp, "pruned-" + fmt)
            subprocess.run([sfsurgery_bin(), "prune", cls.model, "-o", cls.pruned[fmt], "--format", fmt, "--quiet"], check=True)
        os.environ["SFSURGERY_BIN"] = sfsurgery_bin()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    def perplexity(self, model, *extra):
        code, out, err = run_cli("perplexity", model, "--text", os.path.join(self.out, "heldout.txt"), "--json", *extra)
        self.assertEqual(code, 0, err)
        return json.loads(out.splitlines()[-1])

    def test_output_is_an_ordinary_checkpoint(self):
        from transformers import AutoConfig, AutoTokenizer

        with open(os.path.join(self.out, "train.json")) as f:
            info = json.load(f)
        for k in ("seed", "steps", "tokens_trained", "final_loss", "seconds"):
            self.assertIn(k, info)
        sys.path.insert(0, os.path.dirname(TRAIN))
        import recipe

        self.assertEqual(info["parameters"], recipe.RECIPES[info["recipe"]["name"]].parameters(),
                         "the recipe counts the model's parameters otherwise")
        self.assertLess(info["tokens_trained"], info["corpus"]["train_tokens"], "trained for more than an epoch")
        conf = AutoConfig.from_pretrained(self.model)
        self.assertEqual((conf.model_type, conf.tie_word_embeddings), ("llama", False))
        tok = AutoTokenizer.from_pretrained(self.model)
        s = "def f(x):\n    return x + 1\n"
        self.assertEqual(tok.decode(tok(s)["input_ids"]), s)
        self.assertTrue(os.path.getsize(os.path.join(self.out, "train.txt")) > 0)

    def test_ampere_equals_dense_pruned(self):
        dense = self.perplexity(self.model, "--seqlen", "256")
        pruned = self.perplexity(self.pruned["dense"], "--seqlen", "256")
        served = self.perplexity(self.pruned["ampere"], "--seqlen", "256")
        self.assertEqual((dense["format"], pruned["format"], served["format"]), ("dense", "dense", "ampere"))
        self.assertEqual(dense["windows"], served["windows"])
        self.assertLess(dense["perplexity"], 100, "the quick model did not learn")
        self.assertGreater(pruned["perplexity"], dense["perplexity"] * 1.01, "pruning changed nothing")
        rel = abs(served["perplexity"] - pruned["perplexity"]) / pruned["perplexity"]
        self.assertLess(rel, 1e-3, f"served {served['perplexity']} against dense-pruned {pruned['perplexity']}")

    def test_batch_does_not_change_the_result(self):
        a = self.perplexity(self.pruned["ampere"], "--seqlen", "128", "--windows", "12", "--batch", "1")
        b = self.perplexity(self.pruned["ampere"], "--seqlen", "128", "--windows", "12", "--batch", "5")
        self.assertEqual((a["windows"], a["batch"], b["batch"]), (12, 1, 5))
        self.assertLess(abs(a["nll"] - b["nll"]) / a["nll"], 1e-3)

    def test_refusals(self):
        short = write(os.path.join(self.tmp, "short.txt"), "x = 1\n")
        code, _, err = run_cli("perplexity", self.model, "--text", short)
        self.assertEqual(code, 2)
        assertOneLine(self, err, rf"short\.txt: the text has \d+ tokens, fewer than one window of {self.positions}$")
        code, _, err = run_cli("perplexity", self.model, "--text", short, "--seqlen", "100000")
        self.assertEqual(code, 2)
        assertOneLine(self, err, rf"--seqlen 100000: above the model's max_position_embeddings {self.positions} ")

    def test_ampere_without_gpu(self):
        env = dict(os.environ, PYTHONPATH=PYTHON, CUDA_VISIBLE_DEVICES="")
        r = subprocess.run([sys.executable, "-m", "sfsurgery", "perplexity", self.pruned["ampere"], "--text",
                            os.path.join(self.out, "heldout.txt")], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(r.returncode, 2, r.stderr)
        assertOneLine(self, r.stderr, r"pruned-ampere: an sfsurgery ampere checkpoint runs on sfsurgery's GPU kernels: no CUDA GPU")


if __name__ == "__main__":
    unittest.main()
