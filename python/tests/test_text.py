"""Evaluation and calibration text: plain and JSON Lines files, windows
and seeded samples, and every refusal in one line (CPU only)."""

import hashlib
import json
import os
import tempfile
import unittest

from sfsurgery import text
from sfsurgery.errors import InputError


class ReadTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, data: bytes) -> str:
        p = os.path.join(self.dir.name, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def test_plain(self):
        raw = "def f(x):\n    return x\n\n{not json\n".encode()
        t = text.read(self.write("a.txt", raw))
        self.assertEqual((t.text, t.jsonl, t.sha256), (raw.decode(), False, hashlib.sha256(raw).hexdigest()))
        self.assertEqual(text.describe(t), {"file": "a.txt", "sha256": hashlib.sha256(raw).hexdigest(), "kind": "plain"})

    def test_jsonl(self):
        recs = [{"text": "one", "id": 1}, {"text": "two\nlines"}, {"text": ""}]
        raw = ("\n".join(json.dumps(r) for r in recs[:2]) + "\n\n" + json.dumps(recs[2]) + "\n").encode()
        t = text.read(self.write("a.txt", raw))  # the content decides, not the name
        self.assertTrue(t.jsonl)
        self.assertEqual(t.text, "one" + text.JSONL_SEPARATOR + "two\nlines" + text.JSONL_SEPARATOR)

    def test_refusals(self):
        cases = [
            ("missing", None, r"nope\.txt: No such file"),
            ("empty", b"", r"empty text"),
            ("blank", b" \n\t\n", r"empty text"),
            ("not utf-8", b"ok\n\xff\xfe", r"byte 3: not UTF-8"),
            ("jsonl bad line", b'{"text": "a"}\n{oops\n', r"line 2: not JSON"),
            ("jsonl no text", b'{"text": "a"}\n{"body": "b"}\n', r'line 2: want an object with a string "text"'),
            ("jsonl text not string", b'{"text": 3}\n', r'line 1: want an object'),
            ("jsonl array line", b'{"text": "a"}\n[1]\n', r"line 2: want an object"),
            ("jsonl all empty", b'{"text": ""}\n{"text": " "}\n', r'every "text" field is empty'),
        ]
        for name, data, want in cases:
            with self.subTest(name):
                p = os.path.join(self.dir.name, "nope.txt") if data is None else self.write(name + ".txt", data)
                with self.assertRaisesRegex(InputError, want) as cm:
                    text.read(p)
                self.assertNotIn("\n", str(cm.exception))
                if data is not None:
                    self.assertIn(p, str(cm.exception))


class WindowsTest(unittest.TestCase):
    def test_windows(self):
        for tokens, seqlen, limit, want in [
            (10, 3, 0, [0, 3, 6]),
            (9, 3, 0, [0, 3, 6]),
            (10, 3, 2, [0, 3]),
            (10, 3, 5, [0, 3, 6]),
            (4, 4, 0, [0]),
        ]:
            with self.subTest(tokens=tokens, seqlen=seqlen, limit=limit):
                self.assertEqual(text.windows(tokens, seqlen, limit), want)

    def test_windows_refused(self):
        for args, want in [((3, 4), "fewer than one window of 4"), ((10, 0), "seqlen 0"), ((10, 2, -1), "windows -1")]:
            with self.subTest(args=args), self.assertRaisesRegex(InputError, want):
                text.windows(*args)

    def test_samples(self):
        a = text.samples(1000, 100, 64, seed=0)
        self.assertEqual(a, text.samples(1000, 100, 64, seed=0), "seeded")
        self.assertNotEqual(a, text.samples(1000, 100, 64, seed=1))
        self.assertEqual(len(a), 64)
        self.assertTrue(all(0 <= s <= 900 for s in a))
        self.assertIn(900, text.samples(101, 100, 200, seed=3) + text.samples(1000, 100, 5000, seed=3))
        self.assertEqual(text.samples(100, 100, 3, seed=0), [0, 0, 0])
        for args, want in [((99, 100, 1, 0), "fewer than one sample of 100"), ((1000, 100, 0, 0), "0 samples")]:
            with self.subTest(args=args), self.assertRaisesRegex(InputError, want):
                text.samples(*args)

    def test_check_ids(self):
        text.check_ids([0, 5, 7], 8, "x")
        with self.assertRaisesRegex(InputError, "token id 8 is outside the model's vocabulary of 8"):
            text.check_ids([0, 8], 8, "x")


if __name__ == "__main__":
    unittest.main()
