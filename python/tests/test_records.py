"""Launch records: parsing, validation and lookup (CPU only)."""

import copy
import unittest

from fixtures import first_record, golden_launches

from sfsurgery import records
from sfsurgery.errors import RecordError


class GoldenTest(unittest.TestCase):
    """The records `sfsurgery plan` writes parse, and say what they say."""

    def test_parse(self):
        doc = golden_launches()
        t = records.parse(doc)
        self.assertEqual(t.dtype, "bf16")
        self.assertEqual(t.limits, records.Limits(132, 232448, 233472, True))
        want = {(s["n"], s["k"]) for s in doc["shapes"]}
        self.assertEqual(set(t.shapes()), want)
        for s in doc["shapes"]:
            for at in s["launches"]:
                rec = t.lookup(s["n"], s["k"], at["m"])
                self.assertIsNotNone(rec, (s["n"], s["k"], at["m"]))
                self.assertEqual(rec.entry, at["launch"]["entry"])
                self.assertEqual(list(rec.grid), at["launch"]["grid"])
                self.assertEqual([p.source for p in rec.params][-2:], ["bias", "out"])
        absent = max(n for n, _ in want) + 32
        self.assertIsNone(t.lookup(absent, doc["shapes"][0]["k"], 1), "a shape the document lacks")

    def test_lookup_gap(self):
        """An m whose record the planner could not make (launch null, with
        its error) has none; its neighbours keep theirs."""
        doc = golden_launches()
        s = doc["shapes"][0]
        at = s["launches"][3]
        at["launch"], at["error"] = None, "no kernel plan: a test's gap"
        t = records.parse(doc)
        m = at["m"]
        self.assertIsNone(t.lookup(s["n"], s["k"], m))
        for near in (s["launches"][2]["m"], s["launches"][4]["m"]):
            self.assertIsNotNone(t.lookup(s["n"], s["k"], near), near)

    def test_workspace_covers_every_record(self):
        t = records.parse(golden_launches())
        counters, partials = t.workspace()
        self.assertEqual(counters % 4, 0)
        seen = 0
        for per_m in t.launches.values():
            for rec in per_m.values():
                for r in (rec, rec.fallback):
                    if r is not None:
                        self.assertLessEqual(r.counters, counters)
                        self.assertLessEqual(r.partials, partials)
                        seen += r.counters > 0
        self.assertGreater(seen, 0, "the golden document has no split-K launch: the test proves nothing")

    def test_policy_refused(self):
        """A policy reaches the package only through sfsurgery plan --from,
        which prints a launch document: parse refuses one."""
        policy = {"schema": "sfsurgery-policy/2", "dtype": "BF16", "gpu": "NVIDIA H100 80GB HBM3", "entries": []}
        with self.assertRaisesRegex(RecordError, r"^launches\.schema: 'sfsurgery-policy/2', want sfsurgery-launches/1 "
                                    r"\(sfsurgery plan --from turns a policy into one\)$"):
            records.parse(policy)


def _mutate(path, value):
    """Returns a function that sets (or, for value None, deletes) the
    element at path of a record."""

    def f(rec):
        obj = rec
        for key in path[:-1]:
            obj = obj[key]
        if value is None:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value

    return f


def _param(rec, source):
    return next(i for i, p in enumerate(rec["params"]) if p["source"] == source)


class InvalidRecordTest(unittest.TestCase):
    """Every malformed record is refused with what and where."""

    def test_table(self):
        doc = golden_launches()
        base = first_record(doc)
        n, k, m = doc["shapes"][0]["n"], doc["shapes"][0]["k"], doc["shapes"][0]["launches"][0]["m"]
        cases = [
            ("unknown module", _mutate(["module"], "kernels/ptx/other.ptx"), r"\.module: 'kernels/ptx/other.ptx'"),
            ("not an entry point", _mutate(["entry"], "spmm_bf16"), r"\.entry: 'spmm_bf16' is not a decode"),
            ("entry in the other module", _mutate(["module"], "kernels/ptx/sfsurgery.ptx"), r"is not in module"),
            ("short grid", _mutate(["grid"], [1, 1]), r"\.grid: want three integers"),
            ("zero block", _mutate(["block"], [0, 1, 1]), r"\.block: \[0, 1, 1\] out of range"),
            ("huge block", _mutate(["block"], [1024, 2, 1]), r"more than 1024 threads"),
            ("string shared", _mutate(["shared_bytes"], "1"), r"\.shared_bytes: want an integer"),
            ("shared over the limit", _mutate(["shared_bytes"], 300000), r"\.shared_bytes: 300000 out of range"),
            ("bool as int", _mutate(["shared_bytes"], True), r"want an integer"),
            ("no params", _mutate(["params"], None), r"missing 'params'"),
            ("unknown source", lambda r: r["params"][0].update(source="z"), r"unknown source 'z'"),
            ("wrong C type", lambda r: r["params"][_param(r, "y")].update(c_type="float*"), r"params\[0\]: \('Y', 'float\*', 'y'\), want \('Y', 'void\*', 'y'\)"),
            ("x and packed swapped", lambda r: r["params"].insert(1, r["params"].pop(2)), r"params\[1\]: \('P'"),
            ("coop without the cooperative launch", lambda r: r["params"][9].update(value=1 - r["params"][9]["value"]), r"coop = \d with cooperative"),
            ("entry of the other module", _mutate(["entry"], "gemv_bf16_t1_s2"), r"entry gemv_bf16_t1_s2 is not in module kernels/ptx/sfsurgery_sm90a.ptx"),
            ("no bias", lambda r: r["params"].pop(_param(r, "bias")), r"no bias parameter \(records of an older sfsurgery"),
            ("no out", lambda r: r["params"].pop(_param(r, "out")), r"no out parameter"),
            ("x twice", lambda r: r["params"].append(dict(r["params"][_param(r, "x")])), r"params\[12\]: \('X'.*want none"),
            ("M of another m", lambda r: next(p for p in r["params"] if p["name"] == "M").update(value=m + 1), r"M = %d, want %d" % (m + 1, m)),
            ("N of another shape", lambda r: next(p for p in r["params"] if p["name"] == "N").update(value=n * 2), r"N = "),
            ("value beyond int32", lambda r: next(p for p in r["params"] if p["name"] == "K").update(value=1 << 40), r"is not a 32-bit int"),
            ("counters without partials", _mutate(["workspace", "partials"], 0), r"\.workspace: counters"),
        ]
        for name, mutate, want in cases:
            with self.subTest(name):
                rec = copy.deepcopy(base)
                mutate(rec)
                lim = records.Limits(132, 232448, 233472, True)
                with self.assertRaisesRegex(RecordError, want):
                    records.parse_launch(rec, n, k, m, "rec", lim)
        # The unmutated record passes: the cases above fail for their cause.
        records.parse_launch(copy.deepcopy(base), n, k, m, "rec", records.Limits(132, 232448, 233472, True))

    def test_clusters_need_a_fallback(self):
        doc = golden_launches()
        for s in doc["shapes"]:
            for at in s["launches"]:
                rec = at["launch"]
                if rec["cluster"] != [0, 0, 0] or rec["cooperative"]:
                    del rec["fallback"]
                    with self.assertRaisesRegex(RecordError, "needs a fallback"):
                        records.parse_launch(rec, s["n"], s["k"], at["m"], "rec")
                    return
        self.fail("no clustered or cooperative record in the golden document")

    def test_fallbacks(self):
        doc = golden_launches()
        for s in doc["shapes"]:
            for at in s["launches"]:
                rec = at["launch"]
                if rec.get("fallback") is None:
                    continue
                n, k, m = s["n"], s["k"], at["m"]
                for name, mutate, want in [
                    ("cooperative fallback", lambda f: f.update(cooperative=True), r"a fallback is neither cooperative nor in clusters"),
                    ("clustered fallback", lambda f: f.update(cluster=[1, 2, 1]), r"a fallback is neither cooperative nor in clusters"),
                    ("fallback of another dtype", lambda f: f.update(entry=f["entry"].replace("_bf16_", "_f16_")), r"\.fallback: entry \S*_f16_\S* for a \S*_bf16_"),
                    ("fallback of a fallback", lambda f: f.update(fallback=copy.deepcopy(f)), r"a fallback has no fallback of its own"),
                ]:
                    with self.subTest(name):
                        r = copy.deepcopy(rec)
                        mutate(r["fallback"])
                        with self.assertRaisesRegex(RecordError, want):
                            records.parse_launch(r, n, k, m, "rec")
                return
        self.fail("no record with a fallback in the golden document")

    def test_documents(self):
        good = golden_launches()
        cases = [
            ("schema", lambda d: d.update(schema="sfsurgery-launches/0"), r"\.schema: 'sfsurgery-launches/0'"),
            ("dtype", lambda d: d.update(dtype="F32"), r"\.dtype: 'F32'"),
            ("dtype mismatch", lambda d: d.update(dtype="F16"), r"entry gemv\S*_bf16_\S* for a f16 document"),
            ("shape", lambda d: d["shapes"][0].update(n=100), r"shapes\[0\]: shape 100x"),
            ("m", lambda d: d["shapes"][0]["launches"][0].update(m=65), r"\.m: 65 is not"),
            ("limits", lambda d: d["limits"].pop("sms"), r"limits: missing 'sms'"),
            ("not an object", lambda d: d["shapes"].__setitem__(0, []), r"shapes\[0\]: want an object"),
        ]
        for name, mutate, want in cases:
            with self.subTest(name):
                doc = copy.deepcopy(good)
                mutate(doc)
                with self.assertRaisesRegex(RecordError, want):
                    records.parse(doc)

    def test_device_limits(self):
        t = records.parse(golden_launches())
        records.check_device(t, 132, 232448, 9, 0, "H100")
        for args in [(108, 166912, 8, 0, "A100"), (132, 232448, 8, 9, "x"), (114, 232448, 9, 0, "H100 PCIe")]:
            with self.subTest(args[-1]):
                with self.assertRaisesRegex(RecordError, "run `sfsurgery plan` on this GPU"):
                    records.check_device(t, *args)



class PrefillTest(unittest.TestCase):
    """The prefill records of a launch document planned for an H100."""

    def test_lookup(self):
        doc = golden_launches()
        t = records.parse(doc)
        for s in doc["shapes"]:
            ranges = s["prefill"]
            self.assertEqual(ranges[0]["from"], 65)
            for r in ranges:
                for m in (r["from"], r["to"]):
                    got = t.lookup_prefill(s["n"], s["k"], m)
                    self.assertEqual((got.entry, got.tokens, got.rows), (r["entry"], r["tokens"], r["rows"]))
            past = t.lookup_prefill(s["n"], s["k"], ranges[-1]["to"] + 12345)
            self.assertEqual(past.entry, ranges[-1]["entry"], "the last range serves every m above it")
            self.assertIsNone(t.lookup_prefill(s["n"], s["k"], 64))
        absent = max(s["n"] for s in doc["shapes"]) + 32
        self.assertIsNone(t.lookup_prefill(absent, doc["shapes"][0]["k"], 100), "a shape the document lacks")

    def test_refusals(self):
        """Each malformed prefill record is refused with where it is."""
        cases = [
            ("gap", lambda p: p[1].update({"from": p[0]["to"] + 2}), "want a range from"),
            ("first", lambda p: p[0].update({"from": 64}), "want a range from 65"),
            ("backwards", lambda p: p[0].update({"to": 60}), "tokens 65…60"),
            ("module", lambda p: p[0].update({"module": "kernels/ptx/sfsurgery.ptx"}), ".module"),
            ("entry", lambda p: p[0].update({"entry": "gemv_bf16_t1_s2"}), "not a prefill kernel's entry point"),
            ("dtype", lambda p: p[0].update({"entry": p[0]["entry"].replace("bf16", "f16")}), "for a bf16 document"),
            ("tile", lambda p: p[0].update({"tokens": 999}), "rows"),
            ("block", lambda p: p[0].update({"block": 128}), "block 128"),
            ("shared", lambda p: p[0].update({"shared_bytes": 1 << 20}), "shared_bytes"),
            ("shared too small", lambda p: p[0].update({"shared_bytes": p[0]["shared_bytes"] - 1024}), "kernel needs"),
            ("type", lambda p: p[0].update({"to": "4224"}), "want an integer"),
            ("no splits", lambda p: p[0].pop("splits"), "missing 'splits'"),
            ("splits 0", lambda p: p[0].update({"splits": 0}), "splits: 0, want 1…8"),
            ("splits 9", lambda p: p[0].update({"splits": 9}), "splits: 9, want 1…8"),
            ("splits bool", lambda p: p[0].update({"splits": True}), "want an integer"),
            ("splits past a wave", lambda p: p[0].update({"splits": 8, "entry": p[0]["entry"] + "_splitk"}), "want one wave (132)"),
            ("last split", lambda p: p[-1].update({"splits": 2, "entry": p[-1]["entry"] + "_splitk"}), "one split for the last range"),
            ("split entry unsplit", lambda p: p[0].update({"entry": p[0]["entry"] + "_splitk"}), "1 splits of k for entry"),
            ("splits on the plain entry", lambda p: p[0].update({"splits": 2}), "2 splits of k for entry"),
            ("empty", lambda p: p.clear(), "non-empty list"),
        ]
        for name, edit, want in cases:
            doc = golden_launches()
            edit(doc["shapes"][0]["prefill"])
            with self.assertRaises(RecordError, msg=name) as cm:
                records.parse(doc)
            self.assertIn(want, str(cm.exception), name)
            self.assertIn("shapes[0].prefill", str(cm.exception), name)

    def test_split(self):
        """A range that splits k within a wave is accepted, and needs no
        workspace."""
        doc = golden_launches()
        s = doc["shapes"][0]
        p = s["prefill"]
        p.insert(1, dict(p[0], **{"from": 129}))
        p[0].update({"to": 128, "splits": 4, "entry": p[0]["entry"] + "_splitk"})
        t = records.parse(doc)
        rec = t.lookup_prefill(s["n"], s["k"], 100)
        self.assertEqual((rec.last, rec.splits, rec.units(128, s["n"])), (128, 4, 4 * -(-128 // rec.tokens) * -(-s["n"] // rec.rows)))
        self.assertEqual(t.lookup_prefill(s["n"], s["k"], 129).splits, 1)
        self.assertEqual(t.workspace(), records.parse(golden_launches()).workspace())

    def test_no_warpgroup(self):
        doc = golden_launches()
        doc["limits"]["warpgroup"] = False
        with self.assertRaises(RecordError) as cm:
            records.parse(doc)
        self.assertIn("without the sm_90a module", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
