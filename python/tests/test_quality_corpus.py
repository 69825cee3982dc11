"""The test model's corpus and recipe (bench/quality/corpus.py, recipe.py,
train.py's standard-library parts): which files, which side of the split,
the schedule and the step count (CPU only)."""

import math
import os
import sys
import tempfile
import unittest

from fixtures import REPO

sys.path.insert(0, os.path.join(REPO, "bench", "quality"))
import corpus  # noqa: E402
import recipe  # noqa: E402
import train  # noqa: E402


def write(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class SourcesTest(unittest.TestCase):
    def setUp(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        self.lib = os.path.join(d.name, "lib")
        self.site = os.path.join(self.lib, "site-packages")  # nested, as in a pyenv or venv Python
        for rel, size in [("a.py", 10), ("b/c.py", 20), ("b/d.txt", 5), ("__pycache__/e.py", 5), ("z.py", 40),
                          ("site-packages/pkg/f.py", 30), ("site-packages/pkg/__pycache__/g.py", 5)]:
            write(os.path.join(self.lib, rel), b"x" * size)
        os.symlink(os.path.join(self.lib, "a.py"), os.path.join(self.lib, "b", "alias.py"))

    def test_every_file_once_under_its_deepest_root(self):
        got = corpus.sources([("stdlib", self.lib), ("purelib", self.site)], 10**9)
        self.assertEqual([s.name for s in got], ["stdlib/a.py", "stdlib/b/c.py", "purelib/pkg/f.py", "stdlib/z.py"])
        self.assertEqual([s.size for s in got], [10, 20, 30, 40])
        self.assertEqual(got, sorted(got, key=lambda s: s.path))

    def test_limit(self):
        names = lambda limit: [s.name for s in corpus.sources([("stdlib", self.lib), ("purelib", self.site)], limit)]  # noqa: E731
        self.assertEqual(names(10), ["stdlib/a.py"])
        self.assertEqual(names(11), ["stdlib/a.py", "stdlib/b/c.py"])  # the file that reaches the limit is in
        self.assertEqual(names(30), ["stdlib/a.py", "stdlib/b/c.py"])
        self.assertEqual(names(0), [])

    def test_read_all_skips_what_is_not_utf8(self):
        write(os.path.join(self.lib, "bad.py"), b"\xff\xfe")
        got = corpus.read_all(corpus.sources([("stdlib", self.lib), ("purelib", self.site)], 10**9))
        self.assertNotIn("stdlib/bad.py", [s.name for s, _ in got])
        self.assertEqual(len(got), 4)

    def test_roots_of_this_python(self):
        kinds = [k for k, _ in corpus.roots()]
        self.assertEqual(kinds[0], "stdlib")
        self.assertLessEqual(set(kinds), {"stdlib", "purelib", "platlib"})
        every = corpus.roots(every_site=True)
        self.assertEqual(every[: len(kinds)], corpus.roots())
        self.assertLessEqual({k for k, _ in every[len(kinds):]}, {"site"})
        self.assertEqual(len({os.path.realpath(d) for _, d in every}), len(every), "a directory twice")


class SplitTest(unittest.TestCase):
    def test_known_answers(self):
        """The hash is SHA-256 of the name, not Python's salted hash()."""
        names = [f"stdlib/m{i}.py" for i in range(200)]
        self.assertEqual([n for n in names if corpus.is_heldout(n)][:4],
                         ["stdlib/m11.py", "stdlib/m33.py", "stdlib/m41.py", "stdlib/m45.py"])

    def test_about_one_in_twenty(self):
        n = sum(corpus.is_heldout(f"purelib/p/{i}.py") for i in range(20000))
        self.assertEqual(n, 939)
        self.assertLess(abs(n / 20000 - 1 / corpus.HELDOUT_MODULUS), 0.01)

    def test_split_keeps_order(self):
        files = [corpus.Source(f"/x/m{i}.py", f"stdlib/m{i}.py", 1) for i in range(46)]
        train, held = corpus.split(files)
        self.assertEqual([s.name for s in held], ["stdlib/m11.py", "stdlib/m33.py", "stdlib/m41.py", "stdlib/m45.py"])
        self.assertEqual(len(train) + len(held), 46)
        self.assertEqual(train, [s for s in files if s not in held])

    def test_joined(self):
        E = corpus.EOS
        self.assertEqual(corpus.joined(["aaaa", "bb", "cc"], 100), "aaaa" + E + "bb" + E + "cc")
        self.assertEqual(corpus.joined(["aaaa", "bb", "cc"], 4 + len(E) + 2), "aaaa" + E + "bb")
        self.assertEqual(corpus.joined(["aaaa", "bb"], 1), "aaaa")  # at least one
        self.assertEqual(corpus.joined(["é"], 1), "é")
        self.assertEqual(len(corpus.joined(["é" * 10, "b"], 20 + len(E)).encode()), 20)

    def test_head(self):
        text = "ab\ncd\nef"
        for limit, want in [(0, text), (100, text), (8, text), (7, "ab\ncd\n"), (6, "ab\ncd\n"), (5, "ab\n"), (3, "ab\n"),
                            (2, "ab"), (1, "a")]:
            self.assertEqual(corpus.head(text, limit), want, limit)
        self.assertEqual(corpus.head("éé\nx", 3), "é")  # a long first line is cut on a character boundary
        self.assertEqual(corpus.head("é\nx", 3), "é\n")
        self.assertEqual(corpus.joined(["aaa\nbbb", "cc"], 100, cap=4), "aaa\n" + corpus.EOS + "cc")
        self.assertEqual(corpus.joined(["aaa\nbbb", "cc"], 4 + len(corpus.EOS) + 1, cap=4), "aaa\n")

    def test_shuffled_is_seeded(self):
        xs = list(range(100))
        self.assertEqual(corpus.shuffled(xs, 1), corpus.shuffled(xs, 1))
        self.assertNotEqual(corpus.shuffled(xs, 1), corpus.shuffled(xs, 2))
        self.assertEqual(sorted(corpus.shuffled(xs, 1)), xs)


class RecipeTest(unittest.TestCase):
    def test_full_is_the_pilot(self):
        r = recipe.FULL
        self.assertEqual(r.parameters(), 88099584)
        self.assertGreaterEqual(r.parameters(), 75_000_000)
        self.assertGreaterEqual((r.hidden, r.layers), (768, 12))
        self.assertEqual((r.vocab, r.heads, r.kv_heads, r.max_positions, r.seqlen, r.batch), (8192, 12, 4, 1024, 1024, 64))
        self.assertEqual((r.peak_lr, r.warmup, r.final_lr_fraction, r.weight_decay, r.betas, r.clip, r.budget_s),
                         (2e-3, 100, 0.1, 0.1, (0.9, 0.95), 1.0, 180.0))

    def test_shapes_the_kernels_run(self):
        for r in (recipe.FULL, recipe.QUICK):
            shapes = {name: (n, k) for name, n, k in r.projections()}
            stacked = [(shapes["q_proj"][0] + 2 * shapes["k_proj"][0], r.hidden), (2 * r.intermediate, r.hidden)]
            for n, k in list(shapes.values()) + stacked:
                self.assertEqual((n % 32, k % 64), (0, 0), f"{r.name}: {n}x{k}")
            self.assertEqual(r.hidden % r.heads, 0)
            self.assertEqual(r.heads % r.kv_heads, 0)
            self.assertLessEqual(r.seqlen, r.max_positions)
            self.assertLess(r.probe_steps, r.warmup, "the step count is fixed inside the warm-up")

    def test_schedule(self):
        r = recipe.FULL
        total = 900
        lrs = [recipe.lr_at(i, total, r) for i in range(total)]
        self.assertAlmostEqual(lrs[0], r.peak_lr / r.warmup)
        self.assertAlmostEqual(lrs[r.warmup - 1], r.peak_lr)
        self.assertAlmostEqual(lrs[r.warmup], r.peak_lr)
        self.assertAlmostEqual(lrs[-1], r.peak_lr * r.final_lr_fraction)
        mid = r.warmup + (total - 1 - r.warmup) // 2
        self.assertAlmostEqual(lrs[mid], r.peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (mid - r.warmup) / (total - 1 - r.warmup)))))
        self.assertTrue(all(a < b for a, b in zip(lrs[: r.warmup - 1], lrs[1 : r.warmup])))
        self.assertTrue(all(a >= b for a, b in zip(lrs[r.warmup :], lrs[r.warmup + 1 :])))

    def test_planned_steps(self):
        for args, want in [
            ((30, 0.2, 10.0, 180.0, 10000), 30 + 850),
            ((30, 0.2, 10.0, 180.0, 500), 500),  # never past an epoch
            ((30, 0.2, 200.0, 180.0, 10000), 30),  # over budget already
            ((30, 0.0, 1.0, 180.0, 700), 700),
        ]:
            self.assertEqual(recipe.planned_steps(*args), want, args)


class _Chars:
    """A stand-in tokenizer: one token per character."""

    class _Encoding:
        def __init__(self, text):
            self.ids = [ord(c) for c in text]

    def encode(self, text):
        return self._Encoding(text)


class TrainedHeadsTest(unittest.TestCase):
    def test_covered(self):
        # Sequences of 4 tokens; texts at [0, 3), [4, 9), [10, 11), [12, 15); each text's EOS follows it.
        spans = [(0, 3), (4, 9), (10, 11), (12, 15)]
        for trained, want in [
            ([True, True, True, True], [0, 1, 2, 3]),
            ([True, False, True, True], [0, 2, 3]),
            ([True, True, False, True], [0, 3]),
            ([True, True, True], [0, 1, 2]),  # the tail is not a sequence
        ]:
            self.assertEqual([i for i, (a, b) in enumerate(spans) if train.covered(a, b, trained, 4)], want, trained)
        self.assertFalse(train.covered(0, 4, [True, False], 4), "the EOS at 4 lies in sequence 1")

    def test_trained_heads(self):
        # Texts of 3, 9 and 2 one-token characters at [0, 3), [4, 13), [14, 16); sequences of 4 tokens.
        texts = ["ab\n", "cd\nefgh\ni", "jk"]
        spans = [(0, 3), (4, 13), (14, 16)]
        heads = lambda trained, cap: list(train.trained_heads(_Chars(), texts, spans, trained, 4, cap))
        self.assertEqual(heads([True] * 5, 0), texts)
        # The second text's head of 3 bytes ("cd\n", tokens 4..6, and 7) lies in sequence 1 only; "jk" (14, 15 and 16) in 3 and 4.
        self.assertEqual(heads([True, True, False, True, True], 3), ["ab\n", "cd\n", "jk"])
        self.assertEqual(heads([True, True, False, True, True], 0), ["ab\n", "jk"])
        self.assertEqual(heads([True, False, True, True, True], 3), ["ab\n", "jk"])


if __name__ == "__main__":
    unittest.main()
