"""tools/probes/spmm_variants.py: every ablation applies to the committed
prefill kernel, changes exactly what it names, and a variant that no
longer applies stops the script with one line."""

import contextlib
import difflib
import importlib.util
import io
import os
import tempfile
import unittest

from fixtures import REPO

_spec = importlib.util.spec_from_file_location("spmm_variants", os.path.join(REPO, "tools", "probes", "spmm_variants.py"))
spmm_variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(spmm_variants)


def kernel() -> str:
    with open(spmm_variants.KERNEL, encoding="utf-8") as f:
        return f.read()


def run(*argv):
    """Runs the script's main; returns (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = spmm_variants.main(list(argv))
    return code, out.getvalue(), err.getvalue()


class VariantsTest(unittest.TestCase):
    def test_each_applies_once(self):
        src = kernel()
        for name, (_, repl) in spmm_variants.VARIANTS.items():
            with self.subTest(name):
                got = spmm_variants.apply(src, name)
                self.assertNotEqual(got, src)
                for old, _ in repl:
                    self.assertEqual(src.count(old), 1)
                # only lines holding the replaced texts changed
                olds = [old.strip() for old, _ in repl]
                removed = [l[2:].strip() for l in difflib.ndiff(src.splitlines(), got.splitlines()) if l.startswith("- ")]
                self.assertTrue(removed)
                for line in removed:
                    self.assertTrue(any(o in line or line in o for o in olds), line)

    def test_expected_bytes_follow_the_copies(self):
        # a variant that drops a copy must drop its bytes from the expect,
        # or the full barrier would never complete
        src = kernel()
        for name, dropped in (("nox", "S::kBBytes"), ("nopacked", "S::kABytes")):
            got = spmm_variants.apply(src, name)
            self.assertIn(f"mbar_expect(full, S::kStageBytes - {dropped})", got)
            self.assertEqual(got.count("tma2d(st"), src.count("tma2d(st") - 1)

    def test_nostores_guards_every_store(self):
        """Each of the kernel's output stores (put1 of the accumulators and
        of the split sum, the staged 16-bit copy) is behind a guard the
        probe's sums never meet in the nostores variant (a float of 1.2e30,
        or a pair of 16-bit sums whose bits are 0x12345678)."""
        src = kernel()
        got = spmm_variants.apply(src, "nostores")
        stores = [l for l in src.splitlines() if "put1<T>(out" in l or "st.global" in l]
        self.assertEqual(len(stores), 3, stores)
        for line in got.splitlines():
            if "put1<T>(out" in line or "st.global" in line:
                self.assertTrue("1.2345e30f" in line or "0x12345678u" in line, line)

    def test_missing_text_is_one_line(self):
        with self.assertRaises(spmm_variants.VariantError) as cm:
            spmm_variants.apply("// not the kernel\n", "nomma")
        self.assertIn("variant nomma", str(cm.exception))
        self.assertNotIn("\n", str(cm.exception))

    def test_writes_the_named_files(self):
        with tempfile.TemporaryDirectory() as d:
            code, out, err = run(d, "nomma", "onex")
            self.assertEqual((code, err), (0, ""))
            self.assertEqual(sorted(os.listdir(d)), ["nomma.cuh", "onex.cuh"])
            with open(os.path.join(d, "onex.cuh"), encoding="utf-8") as f:
                self.assertEqual(f.read(), spmm_variants.apply(kernel(), "onex"))
            self.assertIn("without", out)

    def test_bad_arguments(self):
        with tempfile.TemporaryDirectory() as d:
            code, _, err = run(d, "nosuch")
            self.assertEqual(code, 2)
            self.assertIn("no variant 'nosuch'", err)
            self.assertEqual(os.listdir(d), [])
        code, _, err = run()
        self.assertEqual(code, 2)


if __name__ == "__main__":
    unittest.main()
