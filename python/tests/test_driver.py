"""The ctypes driver's CPU-side facts: its structures have cuda.h's layout
(the sizes and offsets tools/abi/cuabi.c checks against the header), a
tensor map's slot is 64-byte aligned, a launch falls back only for the
refusal its fallback removes (kernels/decode.go's refused); and the
prepared launches (prepared.py) against a stand-in driver that reads back
what each launch would pass: every parameter of every record of the
golden launch document, what a call writes and what it leaves, the
context retry, the fallback, the prefill kernel's tensor maps and grid,
and the lock."""

import ctypes
import dataclasses
import sys
import threading
import types
import unittest

from fixtures import golden_launches

from sfsurgery import driver, prepared, records
from sfsurgery.errors import DeviceError, RecordError


class LayoutTest(unittest.TestCase):
    def test_launch_config(self):
        c = driver._Config
        self.assertEqual(ctypes.sizeof(c), 56)
        self.assertEqual(c.shared.offset, 24)
        self.assertEqual(c.stream.offset, 32)
        self.assertEqual(c.attrs.offset, 40)
        self.assertEqual(c.nattrs.offset, 48)

    def test_launch_attribute(self):
        self.assertEqual(ctypes.sizeof(driver._Attr), 72)
        self.assertEqual(driver._Attr.val.offset, 8)

    def test_tensor_map(self):
        for _ in range(8):
            t = driver.TensorMap(2, 4096, 64, 128, driver.SWIZZLE_128B, "x")
            base = ctypes.addressof(t._buf)
            self.assertEqual(t.address % 64, 0)
            self.assertLessEqual(t.address + 128, base + ctypes.sizeof(t._buf))
        t = driver.TensorMap(4, 768, 128, 2, driver.SWIZZLE_NONE, "meta")
        self.assertEqual((list(t.dims), list(t.strides), list(t.box), t.dtype), ([768, 0], [3072], [128, 2], driver._TENSOR_UINT32))

    def test_tensor_map_encode_args(self):
        """Driver.tensor_map passes cuTensorMapEncodeTiled its arguments as
        ctypes objects only (its handle has no argtypes: a plain int would
        pass as a 32-bit C int), with the address and rows of this call."""
        got = []
        d = driver.Driver.__new__(driver.Driver)
        d._encode = lambda *a: got.append(a) or 0
        t = driver.TensorMap(2, 4096, 64, 128, driver.SWIZZLE_128B, "x")
        for addr, rows in ((0x7F12_3456_7800, 300), (0x10_0000_0000, 65)):
            d.tensor_map(t, addr, rows)
            a = got[-1]
            self.assertEqual(len(a), 12)
            self.assertTrue(all(isinstance(v, ctypes._SimpleCData) or isinstance(v, ctypes.Array) for v in a), a)
            self.assertEqual([a[0].value, a[1].value, a[2].value, a[3].value], [t.address, driver._TENSOR_UINT16, 2, addr])
            self.assertEqual((list(a[4]), list(a[5]), list(a[6]), list(a[7])), ([4096, rows], [8192], [64, 128], [1, 1]))
            self.assertEqual([v.value for v in a[8:]], [0, driver.SWIZZLE_128B, driver._L2_PROMOTION_256B, 0])
        d._encode = lambda *a: 701  # CUDA_ERROR_... : refused
        d.name = lambda code: "CUDA_ERROR_INVALID_VALUE"
        with self.assertRaisesRegex(DeviceError, r"cuTensorMapEncodeTiled\(x\): CUDA_ERROR_INVALID_VALUE \(701\)"):
            d.tensor_map(t, 0x1000, 1)

    def test_config(self):
        cases = [
            ((0, 0, 0), False, []),
            ((1, 2, 1), False, [(driver._LAUNCH_CLUSTER, [1, 2, 1])]),
            ((0, 0, 0), True, [(driver._LAUNCH_COOPERATIVE, [1, 0, 0])]),
            ((2, 1, 1), True, [(driver._LAUNCH_CLUSTER, [2, 1, 1]), (driver._LAUNCH_COOPERATIVE, [1, 0, 0])]),
        ]
        for cluster, coop, want in cases:
            with self.subTest(cluster=cluster, coop=coop):
                cfg, _ = driver.config((3, 4, 5), (128, 1, 1), 999, cluster, coop)
                self.assertEqual((list(cfg.grid), list(cfg.block), cfg.shared, cfg.stream), ([3, 4, 5], [128, 1, 1], 999, None))
                got = [(cfg.attrs[i].id, list(cfg.attrs[i].val[:3])) for i in range(cfg.nattrs)]
                self.assertEqual(got, want)


class RefusedTest(unittest.TestCase):
    def test_table(self):
        coop = types.SimpleNamespace(cooperative=True, cluster=(0, 0, 0))
        clus = types.SimpleNamespace(cooperative=False, cluster=(2, 1, 1))
        plain = types.SimpleNamespace(cooperative=False, cluster=(0, 0, 0))
        cases = [
            (coop, driver._CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, True),
            (coop, driver._CUDA_ERROR_INVALID_CLUSTER_SIZE, False),
            (clus, driver._CUDA_ERROR_INVALID_CLUSTER_SIZE, True),
            (clus, driver._CUDA_ERROR_NOT_SUPPORTED, True),
            (clus, driver._CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, False),
            (plain, driver._CUDA_ERROR_NOT_SUPPORTED, False),
            (coop, 0, False),
        ]
        for rec, code, want in cases:
            with self.subTest(rec=rec, code=code):
                self.assertEqual(driver._refused(rec, code), want)


class FakeDriver:
    """Stands in for Driver: launch_ex reads back what a launch passes (the
    function, config and every parameter's value) and answers the codes
    queued in codes (then 0); tensor_map writes the address and rows it
    encodes into the map's slot, so a launch that passes the map by value
    shows which encoding it passes."""

    def __init__(self, kernels):
        self.kernels = kernels
        self.launches = []
        self.encodes = []
        self.codes = []
        self.maps = set()
        self.while_launching = None  # called in each launch, for the lock test

    def launch_ex(self, cfg_ptr, fn, params, extra):
        cfg = cfg_ptr.contents
        self.launches.append({
            "fn": fn.value,
            "grid": tuple(cfg.grid), "block": tuple(cfg.block), "shared": cfg.shared, "stream": cfg.stream or 0,
            "attrs": [(cfg.attrs[i].id, tuple(cfg.attrs[i].val[:3])) for i in range(cfg.nattrs)],
            "addrs": [params[i] for i in range(len(params))],
            # What each parameter holds now, as the driver copies it: 8
            # bytes, or a map's first 16.
            "raw": [ctypes.string_at(params[i], 16 if params[i] in self.maps else 8) for i in range(len(params))],
            "in_context": self.kernels.depth > 0,
        })
        if self.while_launching is not None:
            self.while_launching(params)
        return self.codes.pop(0) if self.codes else 0

    def tensor_map(self, t, addr, rows):
        t.dims[1] = rows
        slot = (ctypes.c_uint64 * 2).from_address(t.address)
        slot[0], slot[1] = addr, rows
        self.maps.add(t.address)
        self.encodes.append({"what": t.what, "addr": addr, "rows": rows, "dims": tuple(t.dims), "strides": tuple(t.strides),
                             "box": tuple(t.box), "swizzle": t.swizzle, "dtype": t.dtype})

    def check(self, what, code):
        if code:
            raise DeviceError(f"{what}: CUresult {code}")


class FakeKernels:
    """Stands in for Kernels: entry points numbered in the order they are
    looked up, chosen and fall_back as Kernels keeps them, current() a
    context manager that counts how deep the thread is in it."""

    def __init__(self, sms=132):
        self.sms = sms
        self.driver = FakeDriver(self)
        self.depth = 0
        self.fns = {}
        self.use = {}
        self.fell_back = []

    def function(self, module, entry):
        return self.fns.setdefault((module, entry), 0x1000 + len(self.fns))

    def chosen(self, rec):
        return self.use.get(id(rec), rec)

    def fall_back(self, rec, refused):
        self.fell_back.append((rec, refused))
        self.use[id(rec)] = refused.fallback
        return refused.fallback

    class _Current:
        def __init__(self, k):
            self.k = k

        def __enter__(self):
            self.k.depth += 1

        def __exit__(self, *exc):
            self.k.depth -= 1
            return False

    def current(self):
        return self._Current(self)


PACKED, META, BIAS, WORKSPACE = 0x7000_0000, 0x7100_0000, 0x7200_0000, 0x7300_0000


def table():
    return records.parse(golden_launches())


def decode_params(launch, rec):
    """The values a decode launch passes, read as the record's C types."""
    return [int.from_bytes(r[:4], "little", signed=True) if p.c_type == "int" else int.from_bytes(r, "little")
            for r, p in zip(launch["raw"], rec.params)]


def want_params(rec, y, x, bias):
    """What a launch of rec must pass (launch.md's parameter sources)."""
    src = {"y": y, "x": x, "packed": PACKED, "meta": META, "workspace": WORKSPACE, "bias": bias, "out": 1}
    return [p.value if p.source == "value" else src[p.source] for p in rec.params]


def want_attrs(rec):
    out = []
    if rec.cluster != (0, 0, 0):
        out.append((driver._LAUNCH_CLUSTER, rec.cluster))
    if rec.cooperative:
        out.append((driver._LAUNCH_COOPERATIVE, (1, 0, 0)))
    return out


class DecodeLauncherTest(unittest.TestCase):
    def test_every_record(self):
        """Every decode record of the golden document, with and without a
        bias: the parameters, config and entry point of the launch, then
        a second call that changes y, x and the stream and nothing else."""
        t = table()
        for (n, k), per_m in sorted(t.launches.items()):
            for bias in (0, BIAS):
                kern = FakeKernels()
                w = prepared.Weight(kern, t, n, k, PACKED, META, bias, WORKSPACE)
                for m, rec in sorted(per_m.items()):
                    with self.subTest(n=n, k=k, m=m, bias=bias):
                        lr = w.launcher(m)
                        self.assertIsInstance(lr, prepared.DecodeLauncher)
                        lr(0x1_0000 + m, 0x2_0000 + m, m, 77)
                        lr(0x3_0000 + m, 0x4_0000 + m, m, 0)
                        a, b = kern.driver.launches[-2:]
                        self.assertEqual(decode_params(a, rec), want_params(rec, 0x1_0000 + m, 0x2_0000 + m, bias))
                        self.assertEqual(decode_params(b, rec), want_params(rec, 0x3_0000 + m, 0x4_0000 + m, bias))
                        self.assertEqual((a["grid"], a["block"], a["shared"], a["stream"]), (rec.grid, rec.block, rec.shared_bytes, 77))
                        self.assertEqual(a["attrs"], want_attrs(rec))
                        self.assertEqual(a["fn"], kern.fns[(rec.module, rec.entry)])
                        self.assertEqual(b["stream"], 0)
                        self.assertEqual({x: b[x] for x in ("fn", "grid", "block", "shared", "attrs", "addrs")},
                                         {x: a[x] for x in ("fn", "grid", "block", "shared", "attrs", "addrs")})
                        self.assertFalse(a["in_context"], "a launch that succeeds does not touch the context")
                        self.assertIs(w.launcher(m), lr, "made once per m")

    def test_weights_apart(self):
        """Two weights on one table: each launch passes its own weight."""
        t = table()
        kern = FakeKernels()
        a = prepared.Weight(kern, t, 256, 256, PACKED, META, 0, WORKSPACE)
        b = prepared.Weight(kern, t, 256, 256, PACKED + 0x100000, META + 0x100000, BIAS, WORKSPACE)
        rec = t.lookup(256, 256, 3)
        for w in (a, b, a):
            w.launcher(3)(0x10, 0x20, 3, 0)
        got = [decode_params(x, rec) for x in kern.driver.launches]
        self.assertEqual(got[0], want_params(rec, 0x10, 0x20, 0))
        self.assertEqual(got[2], got[0])
        src = {p.source: v for p, v in zip(rec.params, got[1])}
        self.assertEqual((src["packed"], src["meta"], src["bias"]), (PACKED + 0x100000, META + 0x100000, BIAS))

    def test_context_retry(self):
        """A launch answered with a context error is made once more with
        the device's context current; any other error is not retried."""
        t = table()
        for code in sorted(driver.CONTEXT_ERRORS):
            with self.subTest(code=code):
                kern = FakeKernels()
                lr = prepared.Weight(kern, t, 256, 256, PACKED, META, 0, WORKSPACE).launcher(1)
                kern.driver.codes = [code]
                lr(0x10, 0x20, 1, 5)
                self.assertEqual([x["in_context"] for x in kern.driver.launches], [False, True])
                self.assertEqual(kern.driver.launches[1]["addrs"], kern.driver.launches[0]["addrs"])
                self.assertEqual(kern.depth, 0)
        kern = FakeKernels()
        lr = prepared.Weight(kern, t, 256, 256, PACKED, META, 0, WORKSPACE).launcher(1)
        kern.driver.codes = [700, 700]
        with self.assertRaisesRegex(DeviceError, r"^cuLaunchKernelEx\(gemv_wg_pair_bf16_t1_s2\): CUresult 700$"):
            lr(0x10, 0x20, 1, 5)
        self.assertEqual(len(kern.driver.launches), 1)
        kern.driver.codes = [201, 201]
        with self.assertRaisesRegex(DeviceError, "CUresult 201"):
            lr(0x10, 0x20, 1, 5)

    def test_fallback(self):
        """A clustered launch refused for its clusters launches the fallback
        with the same operands, then and from then on, also in launchers
        made after; a refusal the fallback does not remove raises."""
        t = table()
        rec = t.lookup(256, 256, 2)
        self.assertIsNotNone(rec.fallback)
        for codes in ([driver._CUDA_ERROR_INVALID_CLUSTER_SIZE], [driver._CUDA_ERROR_NOT_SUPPORTED], [201, driver._CUDA_ERROR_INVALID_CLUSTER_SIZE]):
            with self.subTest(codes=codes):
                kern = FakeKernels()
                w = prepared.Weight(kern, t, 256, 256, PACKED, META, BIAS, WORKSPACE)
                kern.driver.codes = list(codes)
                w.launcher(2)(0x10, 0x20, 2, 9)
                calls = kern.driver.launches
                self.assertEqual(len(calls), len(codes) + 1)
                last = calls[-1]
                self.assertEqual(last["fn"], kern.fns[(rec.fallback.module, rec.fallback.entry)])
                self.assertEqual((last["attrs"], last["grid"], last["stream"]), ([], rec.fallback.grid, 9))
                self.assertEqual(decode_params(last, rec.fallback), want_params(rec.fallback, 0x10, 0x20, BIAS))
                self.assertTrue(last["in_context"])
                self.assertEqual(kern.fell_back, [(rec, rec)])
                w.launcher(2)(0x30, 0x40, 2, 9)
                self.assertEqual(len(calls), len(codes) + 2)
                self.assertEqual(calls[-1]["fn"], last["fn"])
                self.assertEqual(decode_params(calls[-1], rec.fallback), want_params(rec.fallback, 0x30, 0x40, BIAS))
                other = prepared.Weight(kern, t, 256, 256, PACKED, META, 0, WORKSPACE)
                other.launcher(2)(0x50, 0x60, 2, 9)
                self.assertEqual(calls[-1]["fn"], last["fn"], "chosen gives the fallback to launchers made after")
        kern = FakeKernels()
        w = prepared.Weight(kern, t, 256, 256, PACKED, META, 0, WORKSPACE)
        kern.driver.codes = [driver._CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE]
        with self.assertRaisesRegex(DeviceError, "CUresult 720"):
            w.launcher(2)(0x10, 0x20, 2, 0)
        self.assertEqual(kern.fell_back, [])

    def test_cooperative_fallback(self):
        t = table()
        rec = dataclasses.replace(t.lookup(256, 256, 4), cluster=(0, 0, 0), cooperative=True)
        t.launches[(256, 256)][4] = rec
        kern = FakeKernels()
        w = prepared.Weight(kern, t, 256, 256, PACKED, META, 0, WORKSPACE)
        w.launcher(4)(0x10, 0x20, 4, 0)
        self.assertEqual(kern.driver.launches[-1]["attrs"], [(driver._LAUNCH_COOPERATIVE, (1, 0, 0))])
        kern.driver.codes = [driver._CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE]
        w.launcher(4)(0x10, 0x20, 4, 0)
        self.assertEqual(kern.driver.launches[-1]["attrs"], [])
        self.assertEqual(kern.driver.launches[-1]["fn"], kern.fns[(rec.fallback.module, rec.fallback.entry)])

    def test_lock(self):
        """Threads launching one weight at once each pass their own y and x:
        the slots do not change while a launch reads them."""
        t = table()
        kern = FakeKernels()
        lr = prepared.Weight(kern, t, 256, 256, PACKED, META, 0, WORKSPACE).launcher(1)
        bad = []

        def reading(params):
            y0, x0 = ctypes.c_uint64.from_address(params[0]).value, ctypes.c_uint64.from_address(params[1]).value
            for _ in range(20):
                pass
            y1, x1 = ctypes.c_uint64.from_address(params[0]).value, ctypes.c_uint64.from_address(params[1]).value
            if (y0, x0) != (y1, x1) or x0 != y0 + 1:
                bad.append((y0, x0, y1, x1))

        kern.driver.while_launching = reading

        def work(base):
            for i in range(2000):
                y = base + 16 * i
                lr(y, y + 1, 1, 0)

        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            threads = [threading.Thread(target=work, args=(b << 32,)) for b in range(1, 5)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        finally:
            sys.setswitchinterval(old)
        self.assertEqual(bad, [])
        self.assertEqual(len(kern.driver.launches), 8000)


class PrefillLauncherTest(unittest.TestCase):
    def setUp(self):
        self.t = table()
        self.kern = FakeKernels(sms=132)
        self.n, self.k = 768, 256
        self.w = prepared.Weight(self.kern, self.t, self.n, self.k, PACKED, META, BIAS, WORKSPACE)

    def params(self, launch):
        """y, the three maps' (address, rows), m, n, k, bias, out."""
        r = launch["raw"]

        def u64(b):
            return int.from_bytes(b[:8], "little")

        def i32(b):
            return int.from_bytes(b[:4], "little", signed=True)

        maps = [(u64(b), u64(b[8:])) for b in r[1:4]]
        return [u64(r[0])] + maps + [i32(r[4]), i32(r[5]), i32(r[6]), u64(r[7]), i32(r[8]), i32(r[9])]

    def test_maps_params_grid(self):
        n, k = self.n, self.k
        d = self.kern.driver
        lr = self.w.launcher(300)
        rec = self.t.lookup_prefill(n, k, 300)
        self.assertIsInstance(lr, prepared.PrefillLauncher)
        self.assertEqual([e["what"] for e in d.encodes], ["packed", "meta"])
        pk, mt = d.encodes
        # 128-row tiles bring 128 columns of k a stage, 256-row ones 64.
        c, sw = {128: (128, driver.SWIZZLE_128B), 256: (64, driver.SWIZZLE_64B)}[rec.rows]
        self.assertEqual((pk["addr"], pk["rows"], pk["dims"], pk["strides"], pk["box"], pk["swizzle"], pk["dtype"]),
                         (PACKED, n, (k // 2, n), (k,), (c // 2, rec.rows), sw, driver._TENSOR_UINT16))
        self.assertEqual((mt["addr"], mt["rows"], mt["dims"], mt["strides"], mt["box"], mt["swizzle"], mt["dtype"]),
                         (META, k // 32, (n, k // 32), (4 * n,), (rec.rows, c // 32), driver.SWIZZLE_NONE, driver._TENSOR_UINT32))
        lr(0xA000, 0xB000, 300, 3)
        xm = d.encodes[-1]
        self.assertEqual((xm["what"], xm["addr"], xm["rows"], xm["dims"], xm["strides"], xm["box"], xm["swizzle"]),
                         ("x", 0xB000, 300, (k, 300), (2 * k,), (64, rec.tokens), driver.SWIZZLE_128B))
        got = d.launches[-1]
        self.assertEqual(rec.splits, 1)
        self.assertEqual(self.params(got), [0xA000, (0xB000, 300), (PACKED, n), (META, k // 32), 300, n, k, BIAS, 1, 1])
        self.assertTrue(all(p % 64 == 0 for p in got["addrs"][1:4]))
        tiles = -(-300 // rec.tokens) * -(-n // rec.rows)
        self.assertEqual((got["grid"], got["block"], got["shared"], got["stream"], got["attrs"]),
                         ((min(tiles, 132), 1, 1), (rec.block, 1, 1), rec.shared_bytes, 3, []))
        self.assertEqual(got["fn"], self.kern.fns[(rec.module, rec.entry)])

    def test_encodes_x_only_when_needed(self):
        """One x encoding at most per call: none for the same x and m, one
        for another x or another m; launchers are per record, shared by
        the m of its range."""
        d = self.kern.driver
        lr = self.w.launcher(100)
        self.assertIs(self.w.launcher(101), lr)
        # y, x, m, and the x encodings the call makes.
        calls = [(0xA000, 0xB000, 100, 1), (0xA100, 0xB000, 100, 0), (0xA200, 0xC000, 100, 1), (0xA300, 0xC000, 101, 1),
                 (0xA400, 0xC000, 101, 0), (0xA500, 0xB000, 100, 1)]
        for y, x, m, want in calls:
            before = len(d.encodes)
            self.w.launcher(m)(y, x, m, 0)
            self.assertEqual(len(d.encodes) - before, want, (y, x, m))
            p = self.params(d.launches[-1])
            self.assertEqual((p[0], p[1], p[4]), (y, (x, m), m))

    def test_split(self):
        """A record that splits k passes its splits, launches every unit
        (tiles times splits, past the SMs too) in clusters of its splits,
        and needs no workspace."""
        ranges = self.t.prefill[(self.n, self.k)]
        first = dataclasses.replace(ranges[0], last=200, splits=3, entry=ranges[0].entry + "_splitk")
        self.t.prefill[(self.n, self.k)] = (first, dataclasses.replace(ranges[0], first=201)) + ranges[1:]
        w = prepared.Weight(self.kern, self.t, self.n, self.k, PACKED, META, BIAS, WORKSPACE)
        lr = w.launcher(150)
        self.assertIs(lr.rec, first)
        for m in (150, 65, 200, 5000):
            lr(0xA000, 0xB000, m, 0)
            got = self.kern.driver.launches[-1]
            self.assertEqual(self.params(got)[-1], 3)
            self.assertNotIn(WORKSPACE, [int.from_bytes(b[:8], "little") for b in got["raw"]])
            units = -(-m // first.tokens) * -(-self.n // first.rows) * 3
            self.assertEqual(got["grid"], (units, 1, 1), m)
            self.assertEqual(got["attrs"], [(driver._LAUNCH_CLUSTER, (3, 1, 1))], m)

    def test_split_clusters_refused(self):
        """Where the driver refuses split K's clusters, the launcher runs the
        same tile with one split (the plain entry point, a persistent grid,
        no clusters), then and on later calls; other errors still raise."""
        ranges = self.t.prefill[(self.n, self.k)]
        first = dataclasses.replace(ranges[0], last=200, splits=4, entry=ranges[0].entry + "_splitk")
        self.t.prefill[(self.n, self.k)] = (first, dataclasses.replace(ranges[0], first=201)) + ranges[1:]
        w = prepared.Weight(self.kern, self.t, self.n, self.k, PACKED, META, BIAS, WORKSPACE)
        d = self.kern.driver
        for code in sorted(driver.CLUSTER_REFUSED):
            with self.subTest(code=code):
                lr = prepared.PrefillLauncher(self.kern, first, self.n, self.k, w._consts)
                d.launches.clear()
                d.codes = [code]
                lr(0xA000, 0xB000, 150, 5)
                tiles = -(-150 // first.tokens) * -(-self.n // first.rows)
                refused, ran = d.launches
                self.assertEqual((refused["grid"], refused["attrs"]), ((4 * tiles, 1, 1), [(driver._LAUNCH_CLUSTER, (4, 1, 1))]))
                self.assertEqual(ran["fn"], self.kern.fns[(first.module, ranges[0].entry)])
                self.assertEqual((ran["grid"], ran["attrs"], ran["stream"], self.params(ran)[-1]), ((min(tiles, 132), 1, 1), [], 5, 1))
                self.assertEqual(self.params(ran)[:4], self.params(refused)[:4])
                lr(0xA000, 0xB000, 200, 0)
                later = d.launches[-1]
                self.assertEqual((later["fn"], later["attrs"], self.params(later)[-1]), (ran["fn"], [], 1))
        lr = prepared.PrefillLauncher(self.kern, first, self.n, self.k, w._consts)
        d.codes = [999]
        with self.assertRaisesRegex(DeviceError, r"^cuLaunchKernelEx\(spmm_wg_bf16_r128_t64_splitk\): CUresult 999$"):
            lr(0xA000, 0xB000, 150, 0)

    def test_grid_per_m(self):
        rec = self.t.lookup_prefill(self.n, self.k, 65)
        lr = self.w.launcher(65)
        for m in (65, 130, rec.last, 65):
            lr(0xA000, 0xB000, m, 0)
            tiles = -(-m // rec.tokens) * -(-self.n // rec.rows)
            self.assertEqual(self.kern.driver.launches[-1]["grid"], (min(tiles, 132), 1, 1), m)

    def test_ranges(self):
        """m past the last range runs the last range's record; m in another
        range its own; without prefill records, m = 65 has none."""
        ranges = self.t.prefill[(self.n, self.k)]
        last = self.w.launcher(ranges[-1].last + 1000)
        self.assertIs(last.rec, ranges[-1])
        self.assertIs(self.w.launcher(ranges[1].first).rec, ranges[1])
        self.t.prefill.clear()
        w = prepared.Weight(self.kern, self.t, self.n, self.k, PACKED, META, 0, WORKSPACE)
        with self.assertRaisesRegex(RecordError, "^sfsurgery.linear: no launch record for 768x256 at m = 65$"):
            w.launcher(65)

    def test_bounded(self):
        """A Weight keeps at most MAX_PREFILL_TOKEN_COUNTS prefill token
        counts besides the decode ones, and keeps the decode ones."""
        dec = {m: self.w.launcher(m) for m in self.t.launches[(self.n, self.k)]}
        for m in range(65, 65 + 3 * prepared.MAX_PREFILL_TOKEN_COUNTS):
            self.w.launcher(m)
        self.assertLessEqual(len(self.w._by_m), records.MAX_TOKENS + prepared.MAX_PREFILL_TOKEN_COUNTS)
        for m, lr in dec.items():
            self.assertIs(self.w.launcher(m), lr)

    def test_context_retry(self):
        d = self.kern.driver
        lr = self.w.launcher(70)
        d.codes = [201]
        lr(0xA000, 0xB000, 70, 0)
        self.assertEqual([x["in_context"] for x in d.launches], [False, True])
        d.codes = [999]
        with self.assertRaisesRegex(DeviceError, r"^cuLaunchKernelEx\(spmm_wg_bf16_r128_t64\): CUresult 999$"):
            lr(0xA000, 0xB000, 70, 0)


if __name__ == "__main__":
    unittest.main()
