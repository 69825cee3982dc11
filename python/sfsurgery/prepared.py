"""Launches prepared once per weight and token count, so that a call of
the kernels writes three numbers and makes one driver call.

A `Weight` is one 2:4 weight (the device addresses of its packed, meta and
bias) with one table's launch records on one device. Its `launcher(m)` is
made at the first call with m tokens and kept:

- `DecodeLauncher` (m ≤ 64): the record's launch (or its fallback, as
  `Kernels.chosen` gives) with its config and parameter slots built once,
  the constant ones (packed, meta, workspace, bias, out and the values)
  already written; a call writes y's and x's addresses and the stream;
- `PrefillLauncher` (the prefill kernel, one per record: a range of m):
  the packed and meta tensor maps encoded once, the x map encoded again
  only when x's address or m changed since the last call (one
  `cuTensorMapEncodeTiled` at most), the grid computed when m changes
  (every unit, in clusters of its splits, for a record that splits k; where
  the driver refuses those clusters, the same tile unsplit from then on).

A launch does not touch the context: where the driver answers that the
thread has none current, or another device's (driver.CONTEXT_ERRORS), it
launches once more with the device's primary context current. A decode
launch the driver refuses for its cooperative launch or clusters
(driver._refused) is replaced by the record's fallback, then and from then
on (`Kernels.fall_back`). Each launcher's slots are written and launched
under its own lock, so that threads launching the same weight at once do
not mix their operands.

A launcher depends only on what a `Weight` is made from (records, device,
shape, addresses), so weights can be cached by those (ops.py does). Only
ctypes and the standard library: the package's CPU tests check the slots
with a stand-in driver (python/tests/test_driver.py).
"""

import ctypes
import threading
from typing import Dict, Union

from . import driver
from .errors import RecordError
from .records import MAX_TOKENS, Launch, Prefill, Table

# Token counts a Weight keeps launchers for beyond the decode kernels' (one
# per m up to MAX_TOKENS); past it the prefill ones are dropped (their
# launchers, one per record, stay).
MAX_PREFILL_TOKEN_COUNTS = 256


class DecodeLauncher:
    """A decode kernel's record bound to one weight (module doc)."""

    def __init__(self, kernels, rec: Launch, consts: Dict[str, int]):
        self._kernels = kernels
        self._rec = rec
        self._consts = consts
        self._lock = threading.Lock()
        self._launch = kernels.driver.launch_ex
        self._bind(kernels.chosen(rec))

    def _bind(self, use: Launch) -> None:
        """Builds the config and slots of use (the record or its fallback)."""
        fn = ctypes.c_void_p(self._kernels.function(use.module, use.entry))  # first: it may raise
        slots = []
        y = x = None
        for p in use.params:
            if p.source == "value":
                slot = ctypes.c_int(p.value)
            elif p.source == "out":
                slot = ctypes.c_int(1)  # y in the activation dtype
            elif p.source in ("y", "x"):
                slot = ctypes.c_void_p(0)
                if p.source == "y":
                    y = slot
                else:
                    x = slot
            else:
                slot = ctypes.c_void_p(self._consts[p.source])
            slots.append(slot)
        if y is None or x is None:
            raise RecordError(f"launch {use.entry}: no y or x parameter")
        self.use = use
        self._slots = slots
        self._y, self._x = y, x
        self._params = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
        self._cfg, self._attrs = driver.config(use.grid, use.block, use.shared_bytes, use.cluster, use.cooperative)
        self._cfg_ptr = ctypes.pointer(self._cfg)
        self._fn = fn

    def __call__(self, y: int, x: int, m: int, stream: int) -> None:
        """Queues the launch for output y and activations x (device
        addresses; m is the record's) on stream."""
        with self._lock:
            self._y.value = y
            self._x.value = x
            self._cfg.stream = stream
            code = self._launch(self._cfg_ptr, self._fn, self._params, None)
            if code:
                code = self._again(code)
        if code:
            self._kernels.driver.check(f"cuLaunchKernelEx({self.use.entry})", code)

    def _again(self, code: int) -> int:
        """After a failed launch: launches again with the device's context
        current where the thread had none or another, and with the
        fallback where the driver refused the cooperative launch or the
        clusters. Returns the last CUresult."""
        with self._kernels.current():
            if code in driver.CONTEXT_ERRORS:
                code = self._launch(self._cfg_ptr, self._fn, self._params, None)
            if self.use.fallback is not None and driver._refused(self.use, code):
                y, x, stream = self._y.value, self._x.value, self._cfg.stream
                self._bind(self._kernels.fall_back(self._rec, self.use))
                self._y.value, self._x.value, self._cfg.stream = y, x, stream
                code = self._launch(self._cfg_ptr, self._fn, self._params, None)
        return code


class PrefillLauncher:
    """The prefill kernel's record bound to one n × k weight (module doc;
    launch.md: tensor maps, grid, parameters)."""

    def __init__(self, kernels, rec: Prefill, n: int, k: int, consts: Dict[str, int]):
        self._kernels = kernels
        self.rec = rec
        self._n = n
        d = kernels.driver
        self._driver = d
        self._launch = d.launch_ex
        self._lock = threading.Lock()
        self._xmap = driver.TensorMap(2, k, 64, rec.tokens, driver.SWIZZLE_128B, "x")
        c = rec.stage_k
        self._pmap = driver.TensorMap(2, k // 2, c // 2, rec.rows, driver.SWIZZLE_128B if c == 128 else driver.SWIZZLE_64B,
                                      "packed")
        self._mmap = driver.TensorMap(4, n, rec.rows, c // 32, driver.SWIZZLE_NONE, "meta")
        d.tensor_map(self._pmap, consts["packed"], n)
        d.tensor_map(self._mmap, consts["meta"], k // 32)
        self._y = ctypes.c_void_p(0)
        self._m = ctypes.c_int(0)
        self._slots = [ctypes.c_int(n), ctypes.c_int(k), ctypes.c_void_p(consts["bias"]), ctypes.c_int(1),
                       ctypes.c_int(rec.splits)]
        addrs = [ctypes.addressof(self._y), self._xmap.address, self._pmap.address, self._mmap.address, ctypes.addressof(self._m)]
        self._params = (ctypes.c_void_p * 10)(*addrs, *[ctypes.addressof(s) for s in self._slots])
        # The splits launched and their entry point: the record's, or one
        # split of the same tile once the driver refused its clusters.
        self._splits, self.entry = rec.splits, rec.entry
        cluster = (rec.splits, 1, 1) if rec.splits > 1 else (0, 0, 0)
        self._cfg, self._attrs = driver.config((1, 1, 1), (rec.block, 1, 1), rec.shared_bytes, cluster)
        self._cfg_ptr = ctypes.pointer(self._cfg)
        self._fn = ctypes.c_void_p(kernels.function(rec.module, rec.entry))
        self._sms = kernels.sms
        # The x the map was last encoded for; None: encode at the next call.
        self._x = None

    def _grid(self, m: int) -> int:
        """The CTAs of a launch at m tokens: every unit for split K, else
        a persistent grid of at most one CTA per SM."""
        units = -(-m // self.rec.tokens) * -(-self._n // self.rec.rows) * self._splits
        return units if self._splits > 1 else min(units, self._sms)

    def _unsplit(self) -> None:
        """After the driver refused the clusters of split K: the same tile
        with K in one split (its plain entry point, a persistent grid, no
        clusters), then and from then on; the same product, other
        rounding of the sums."""
        self._splits, self.entry = 1, self.rec.entry.removesuffix("_splitk")
        self._fn.value = self._kernels.function(self.rec.module, self.entry)
        self._slots[4].value = 1
        stream = self._cfg.stream
        self._cfg, self._attrs = driver.config((self._grid(self._m.value), 1, 1), (self.rec.block, 1, 1), self.rec.shared_bytes)
        self._cfg.stream = stream
        self._cfg_ptr = ctypes.pointer(self._cfg)

    def __call__(self, y: int, x: int, m: int, stream: int) -> None:
        """Queues the launch for output y and activations x (device
        addresses) of m tokens on stream."""
        with self._lock:
            if m != self._m.value:
                self._x = None
                self._m.value = m
                self._cfg.grid[0] = self._grid(m)
            if x != self._x:
                self._x = None
                self._driver.tensor_map(self._xmap, x, m)
                self._x = x
            self._y.value = y
            self._cfg.stream = stream
            code = self._launch(self._cfg_ptr, self._fn, self._params, None)
            if code in driver.CONTEXT_ERRORS:
                with self._kernels.current():
                    code = self._launch(self._cfg_ptr, self._fn, self._params, None)
            if self._splits > 1 and code in driver.CLUSTER_REFUSED:
                self._unsplit()
                code = self._launch(self._cfg_ptr, self._fn, self._params, None)
            entry = self.entry
        if code:
            self._driver.check(f"cuLaunchKernelEx({entry})", code)


Launcher = Union[DecodeLauncher, PrefillLauncher]


class Weight:
    """One n × k weight at device addresses packed, meta and bias (0 for
    none) with table's records on the device of kernels, the split-K
    workspace's partial sums at workspace: its launchers per token count,
    made at first use."""

    def __init__(self, kernels, table: Table, n: int, k: int, packed: int, meta: int, bias: int, workspace: int):
        self._kernels = kernels
        self._table = table
        self.n, self.k = n, k
        self._consts = {"packed": packed, "meta": meta, "bias": bias, "workspace": workspace}
        self._by_m: Dict[int, Launcher] = {}
        self._prefill: Dict[Prefill, PrefillLauncher] = {}
        self._lock = threading.Lock()

    def launcher(self, m: int) -> Launcher:
        """Returns the launcher for m tokens (m ≥ 1): the decode record's
        for m, else the prefill record's serving m; raises RecordError
        where the table has neither."""
        got = self._by_m.get(m)
        if got is None:
            got = self._make(m)
        return got

    def _make(self, m: int) -> Launcher:
        n, k = self.n, self.k
        with self._lock:
            got = self._by_m.get(m)
            if got is not None:
                return got
            rec = self._table.lookup(n, k, m)
            if rec is not None:
                got = DecodeLauncher(self._kernels, rec, self._consts)
            else:
                pf = self._table.lookup_prefill(n, k, m)
                if pf is None:
                    raise RecordError(f"sfsurgery.linear: no launch record for {n}x{k} at m = {m}")
                got = self._prefill.get(pf)
                if got is None:
                    got = PrefillLauncher(self._kernels, pf, n, k, self._consts)
                    self._prefill[pf] = got
                if len(self._by_m) >= MAX_TOKENS + MAX_PREFILL_TOKEN_COUNTS:
                    self._by_m = {t: v for t, v in self._by_m.items() if t <= MAX_TOKENS}
            self._by_m[m] = got
            return got
