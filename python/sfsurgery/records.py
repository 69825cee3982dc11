"""Launch records: the Go planner's decisions as data (docs/launch.md).

`sfsurgery plan <checkpoint> --json` writes a launch document
(schema "sfsurgery-launches/1"). The package launches only documents the
planner printed on this machine (discover.py: a launch document or a
`sfsurgery bench --policy` file from elsewhere goes through `sfsurgery
plan --from`, which checks every record against the planner's own and
prints the planner's document). This module parses a launch document into
a `Table` and checks every record against the contract as a second line,
so that a record the kernels would misread is refused here, with what and
where, instead of launched. Any other schema, a policy's included, is
refused. It needs nothing beyond the standard library: the package's CPU
tests run it in CI.
"""

import re
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from .errors import RecordError

LAUNCHES_SCHEMA = "sfsurgery-launches/1"

# The PTX modules records name, as repository paths, and their file names
# in the package (sfsurgery/ptx/).
MODULES = {
    "kernels/ptx/sfsurgery.ptx": "sfsurgery.ptx",
    "kernels/ptx/sfsurgery_sm90a.ptx": "sfsurgery_sm90a.ptx",
}

# The parameter sources (launchplan.Source).
SOURCES = ("y", "x", "packed", "meta", "workspace", "bias", "out", "value")
_MAX_PARAMS = 16

# The decode kernels' entry points per module (launchplan.EntryPoints).
_FAMILIES = {
    "kernels/ptx/sfsurgery.ptx": ("gemv",),
    "kernels/ptx/sfsurgery_sm90a.ptx": ("gemv_wg", "gemv_wg64", "gemv_wg_pair", "gemv_wg64_pair", "gemv_hy", "gemv_hy_pair"),
}
_ENTRY = re.compile(r"^(gemv(?:_wg|_wg64|_hy)?(?:_pair)?)_(bf16|f16)_t(1|2|4|8)_s(2|4)$")
# The prefill kernel's entry points (launchplan.PrefillTiles) and module.
_PREFILL_ENTRY = re.compile(r"^spmm_wg_(bf16|f16)_r(128|256)_t(64|128|192)(_splitk)?$")
_PREFILL_MODULE = "kernels/ptx/sfsurgery_sm90a.ptx"
# launchplan.MaxPrefillSplits: the most splits of k a prefill record may
# ask for; and the most units a split record may make where the document
# has no limits to take one wave from.
MAX_PREFILL_SPLITS = 8
MAX_SPLIT_UNITS = 1024

# The decode kernels' parameters in order (kernels/cuda/sfsurgery.cu,
# sfsurgery_sm90a.cu; launchplan.Plan.Launch): name, C type, source. The
# tenth is kw in sfsurgery.ptx and coop in the sm_90a module.
SIGNATURE = (
    ("Y", "void*", "y"),
    ("X", "const uint16_t*", "x"),
    ("P", "const uint16_t*", "packed"),
    ("U", "const uint32_t*", "meta"),
    ("W", "float*", "workspace"),
    ("M", "int", "value"),
    ("N", "int", "value"),
    ("K", "int", "value"),
    ("xwin", "int", "value"),
    (None, "int", "value"),
    ("B", "const uint16_t*", "bias"),
    ("out", "int", "out"),
)

_DTYPES = {"BF16": "bf16", "F16": "f16"}
# launchplan.MaxTokens: the decode kernels' most tokens; the prefill
# kernel's records start above it.
MAX_TOKENS = 64
_INT32 = (-(1 << 31), (1 << 31) - 1)


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, C type, source and literal value."""

    name: str
    c_type: str
    source: str
    value: int


@dataclass(frozen=True)
class Launch:
    """One launch of a decode kernel (launchplan.Launch)."""

    module: str
    entry: str
    grid: Tuple[int, int, int]
    block: Tuple[int, int, int]
    cluster: Tuple[int, int, int]
    shared_bytes: int
    cooperative: bool
    counters: int
    partials: int
    params: Tuple[Param, ...]
    fallback: Optional["Launch"]

    @property
    def dtype(self) -> str:
        """The element type of the entry point: "bf16" or "f16"."""
        return _ENTRY.match(self.entry).group(2)


@dataclass(frozen=True)
class Prefill:
    """The prefill kernel's launch for the token counts first … last of one
    shape (launchplan.PrefillRecord): entry point, tile (rows × tokens),
    splits of k, block and dynamic shared memory; the grid is
    min(ceil(m/tokens) · ceil(n/rows), SMs) unsplit, else every unit,
    ceil(m/tokens) · ceil(n/rows) · splits, in clusters of (splits, 1, 1),
    and the parameters are y, the tensor maps of x, packed and meta, m, n,
    k, bias, out and splits (docs/launch.md)."""

    first: int
    last: int
    module: str
    entry: str
    rows: int
    tokens: int
    splits: int
    block: int
    shared_bytes: int

    @property
    def dtype(self) -> str:
        """The element type of the entry point: "bf16" or "f16"."""
        return _PREFILL_ENTRY.match(self.entry).group(1)

    @property
    def stage_k(self) -> int:
        """The columns of k a stage of the tile brings (prefill_stage_k)."""
        return prefill_stage_k(self.rows)

    def units(self, m: int, n: int) -> int:
        """The kernel's units of work at m tokens of an n-row weight: its
        tiles times its splits of k."""
        return -(-m // self.tokens) * -(-n // self.rows) * self.splits


@dataclass(frozen=True)
class Limits:
    """The device limits records were planned for (launchplan.Limits)."""

    sms: int
    shared_per_block: int
    shared_per_sm: int
    warpgroup: bool


@dataclass
class Table:
    """The records of one element type, planned for the device limits
    `limits` of the GPU named `device`: launch per (n, k) and token count
    m."""

    dtype: str
    device: str
    limits: Limits
    launches: Dict[Tuple[int, int], Dict[int, Launch]]
    # The prefill kernel's ranges per (n, k), in order (launch documents
    # planned for sm_90a).
    prefill: Dict[Tuple[int, int], Tuple[Prefill, ...]] = field(default_factory=dict)

    def lookup(self, n: int, k: int, m: int) -> Optional[Launch]:
        """Returns the record for an n × k weight at m tokens, or None."""
        return self.launches.get((n, k), {}).get(m)

    def lookup_prefill(self, n: int, k: int, m: int) -> Optional[Prefill]:
        """Returns the prefill record serving m tokens of an n × k weight:
        the range holding m, the last range for m past it, or None (no
        prefill records, or m below the first range)."""
        ranges = self.prefill.get((n, k), ())
        if not ranges or m < ranges[0].first:
            return None
        for r in ranges:
            if m <= r.last:
                return r
        return ranges[-1]

    def shapes(self):
        """Returns the (n, k) shapes that have records, sorted."""
        return sorted(self.launches)

    def workspace(self) -> Tuple[int, int]:
        """Returns the counters and partial sums one workspace shared by
        every record (and fallback) of the table needs: counters rounded up to a multiple of 4, so that the
        partial sums start 16-byte aligned after them."""
        counters = partials = 0
        for per_m in self.launches.values():
            for rec in per_m.values():
                r = rec
                while r is not None:
                    counters = max(counters, r.counters)
                    partials = max(partials, r.partials)
                    r = r.fallback
        return (counters + 3) // 4 * 4, partials


def _where(where: str, key) -> str:
    return f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]"


def _get(obj, key, kind, where):
    if not isinstance(obj, Mapping):
        raise RecordError(f"{where}: want an object, got {type(obj).__name__}")
    if key not in obj:
        raise RecordError(f"{where}: missing {key!r}")
    v = obj[key]
    if kind is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise RecordError(f"{_where(where, key)}: want an integer, got {v!r}")
    elif not isinstance(v, kind):
        raise RecordError(f"{_where(where, key)}: want {kind.__name__}, got {v!r}")
    return v


def _dim3(obj, key, where, zero_ok=False):
    v = _get(obj, key, list, where)
    w = _where(where, key)
    if len(v) != 3 or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise RecordError(f"{w}: want three integers, got {v!r}")
    if zero_ok and v == [0, 0, 0]:
        return (0, 0, 0)
    if any(x < 1 or x > (1 << 31) - 1 for x in v):
        raise RecordError(f"{w}: {v!r} out of range")
    return tuple(v)


def parse_launch(obj, n: int, k: int, m: int, where: str, limits: Optional[Limits] = None, nested=False) -> Launch:
    """Parses and checks one record for an n × k weight at m tokens."""
    module = _get(obj, "module", str, where)
    if module not in MODULES:
        raise RecordError(f"{where}.module: {module!r} is not one of {sorted(MODULES)}")
    entry = _get(obj, "entry", str, where)
    em = _ENTRY.match(entry)
    if not em:
        raise RecordError(f"{where}.entry: {entry!r} is not a decode kernel's entry point")
    if em.group(1) not in _FAMILIES[module]:
        raise RecordError(f"{where}: entry {entry} is not in module {module}")
    grid = _dim3(obj, "grid", where)
    block = _dim3(obj, "block", where)
    if block[0] * block[1] * block[2] > 1024:
        raise RecordError(f"{where}.block: {block} is more than 1024 threads")
    cluster = _dim3(obj, "cluster", where, zero_ok=True)
    if cluster != (0, 0, 0) and any(g % c for g, c in zip(grid, cluster)):
        raise RecordError(f"{where}.cluster: {cluster} does not divide the grid {grid}")
    shared = _get(obj, "shared_bytes", int, where)
    if shared < 0 or (limits is not None and shared > limits.shared_per_block):
        raise RecordError(f"{where}.shared_bytes: {shared} out of range")
    coop = _get(obj, "cooperative", bool, where)
    if nested and (coop or cluster != (0, 0, 0)):
        raise RecordError(f"{where}: a fallback is neither cooperative nor in clusters")
    ws = _get(obj, "workspace", dict, where)
    counters = _get(ws, "counters", int, where + ".workspace")
    partials = _get(ws, "partials", int, where + ".workspace")
    if counters < 0 or partials < 0 or (counters == 0) != (partials == 0):
        raise RecordError(f"{where}.workspace: counters {counters}, partials {partials}")
    raw = _get(obj, "params", list, where)
    if not raw or len(raw) > _MAX_PARAMS:
        raise RecordError(f"{where}.params: {len(raw)} parameters")
    params = []
    for i, p in enumerate(raw):
        pw = f"{where}.params[{i}]"
        name = _get(p, "name", str, pw)
        ctype = _get(p, "c_type", str, pw)
        source = _get(p, "source", str, pw)
        value = _get(p, "value", int, pw)
        if source not in SOURCES:
            raise RecordError(f"{pw}: unknown source {source!r} (records from a newer sfsurgery?)")
        if not _INT32[0] <= value <= _INT32[1]:
            raise RecordError(f"{pw}: value {value} is not a 32-bit int")
        params.append(Param(name, ctype, source, value))
    last = "kw" if module == "kernels/ptx/sfsurgery.ptx" else "coop"
    want = [(n or last, c, src) for n, c, src in SIGNATURE]
    have = [(p.name, p.c_type, p.source) for p in params]
    if have != want:
        sources = {p.source for p in params}
        missing = [src for src in ("bias", "out") if src not in sources]
        if missing:
            raise RecordError(
                f"{where}.params: no {', '.join(missing)} parameter (records of an older sfsurgery: "
                "plan again with this repository's sfsurgery)"
            )
        for i in range(max(len(have), len(want))):
            h = have[i] if i < len(have) else "none"
            w = want[i] if i < len(want) else "none"
            if h != w:
                raise RecordError(f"{where}.params[{i}]: {h}, want {w}")
    for name, v in (("M", m), ("N", n), ("K", k)):
        got = next(p.value for p in params if p.name == name)
        if got != v:
            raise RecordError(f"{where}.params: {name} = {got}, want {v} for this shape and m")
    tenth = params[9].value
    if last == "coop" and tenth != int(coop):
        raise RecordError(f"{where}.params: coop = {tenth} with cooperative {coop}")
    if last == "kw" and tenth not in (1, 2, 4, 8):
        raise RecordError(f"{where}.params: kw = {tenth}, want 1, 2, 4 or 8")
    if coop and last == "kw":
        raise RecordError(f"{where}: the mma.sp kernel has no cooperative form")
    fallback = None
    if "fallback" in obj and obj["fallback"] is not None:
        if nested:
            raise RecordError(f"{where}.fallback: a fallback has no fallback of its own")
        fallback = parse_launch(obj["fallback"], n, k, m, where + ".fallback", limits, nested=True)
        if fallback.dtype != _ENTRY.match(entry).group(2):
            raise RecordError(f"{where}.fallback: entry {fallback.entry} for a {entry} launch")
    elif (coop or cluster != (0, 0, 0)) and not nested:
        raise RecordError(f"{where}: a cooperative or clustered launch needs a fallback")
    return Launch(module, entry, grid, block, cluster, shared, coop, counters, partials, tuple(params), fallback)


def prefill_stage_k(rows: int) -> int:
    """The columns of k one stage of the prefill kernel's tile of rows
    brings into its ring (spmm_wg.cuh's Shape::kCols, launchplan's
    PrefillTile.StageK): 128 for the 128-row tiles, 64 for the 256-row
    ones. The packed values' tensor map has boxes of stage_k/2 columns in
    the stage_k-byte swizzle, the meta's boxes stage_k/32 rows."""
    return 128 if rows == 128 else 64


def _prefill_shared(rows: int, tokens: int) -> int:
    """The dynamic shared memory the prefill kernel's tile of rows ×
    tokens reads and writes (spmm_wg.cuh's Shape, launchplan's
    PrefillTile.SharedBytes): 1024 bytes of alignment slack, a ring of as
    many stages of c·(2·tokens + 9·rows/8) bytes (c = prefill_stage_k) as
    fit in 231,296 bytes (at most 8), and two mbarriers a stage. A record
    that says less would let the kernel run past its shared memory."""
    c = prefill_stage_k(rows)
    stage = 2 * c * tokens + c * rows + c * rows // 8
    stages = min(8, 231296 // stage)
    return 1024 + stages * stage + 16 * stages


def parse_prefill(raw, n: int, k: int, dtype: str, limits: Optional[Limits], where: str) -> Tuple[Prefill, ...]:
    """Parses and checks a shape's prefill records: ranges of m from 65 up,
    contiguous and in order, each an entry point of the prefill kernel of
    the document's element type whose tile, block and shared memory agree
    with its name, k in 1 … MAX_PREFILL_SPLITS splits (more than one
    exactly for the _splitk entry points); a range of several
    splits fills at most one wave at its last m (at most MAX_SPLIT_UNITS
    units without limits), and the last range, which serves every m past
    it, has one."""
    if not isinstance(raw, list) or not raw:
        raise RecordError(f"{where}: want a non-empty list of prefill records")
    if limits is not None and not limits.warpgroup:
        raise RecordError(f"{where}: prefill records for a device without the sm_90a module")
    out = []
    for i, r in enumerate(raw):
        w = f"{where}[{i}]"
        first, last = _get(r, "from", int, w), _get(r, "to", int, w)
        want = MAX_TOKENS + 1 if i == 0 else out[-1].last + 1
        if first != want or last < first:
            raise RecordError(f"{w}: tokens {first}…{last}, want a range from {want}")
        module = _get(r, "module", str, w)
        if module != _PREFILL_MODULE:
            raise RecordError(f"{w}.module: {module!r}, want {_PREFILL_MODULE!r}")
        entry = _get(r, "entry", str, w)
        em = _PREFILL_ENTRY.match(entry)
        if not em:
            raise RecordError(f"{w}.entry: {entry!r} is not a prefill kernel's entry point")
        if em.group(1) != dtype:
            raise RecordError(f"{w}: entry {entry} for a {dtype} document")
        rows, tokens = _get(r, "rows", int, w), _get(r, "tokens", int, w)
        block, shared = _get(r, "block", int, w), _get(r, "shared_bytes", int, w)
        if (rows, tokens) != (int(em.group(2)), int(em.group(3))) or block != rows + 128:
            raise RecordError(f"{w}: rows {rows}, tokens {tokens}, block {block} for entry {entry}")
        if shared != _prefill_shared(rows, tokens) or (limits is not None and shared > limits.shared_per_block):
            raise RecordError(f"{w}.shared_bytes: {shared}, the {entry} kernel needs {_prefill_shared(rows, tokens)}")
        splits = _get(r, "splits", int, w)
        if not 1 <= splits <= MAX_PREFILL_SPLITS:
            raise RecordError(f"{w}.splits: {splits}, want 1…{MAX_PREFILL_SPLITS}")
        if (splits > 1) != bool(em.group(4)):
            raise RecordError(f"{w}: {splits} splits of k for entry {entry} (the _splitk entry points split, the others do not)")
        rec = Prefill(first, last, module, entry, rows, tokens, splits, block, shared)
        wave = limits.sms if limits is not None else MAX_SPLIT_UNITS
        if splits > 1 and (i == len(raw) - 1 or rec.units(last, n) > wave):
            raise RecordError(f"{w}.splits: {splits} at {first}…{last} tokens makes {rec.units(last, n)} units, "
                              f"want one wave ({wave}) and one split for the last range")
        out.append(rec)
    return tuple(out)


def _limits(obj, where) -> Limits:
    w = where + ".limits"
    return Limits(
        sms=_get(obj, "sms", int, w),
        shared_per_block=_get(obj, "shared_per_block", int, w),
        shared_per_sm=_get(obj, "shared_per_sm", int, w),
        warpgroup=_get(obj, "warpgroup", bool, w),
    )


def _shape(entry, where) -> Tuple[int, int]:
    n = _get(entry, "n", int, where)
    k = _get(entry, "k", int, where)
    if n < 32 or n % 32 or k < 64 or k % 64 or n > 1 << 30 or k > 1 << 30:
        raise RecordError(f"{where}: shape {n}x{k} is not one of the decode kernels (n % 32, k % 64)")
    return n, k


def _add(table: Table, n: int, k: int, m: int, rec: Launch, where: str):
    if rec.dtype != table.dtype:
        raise RecordError(f"{where}: entry {rec.entry} for a {table.dtype} document")
    per_m = table.launches.setdefault((n, k), {})
    if m in per_m and per_m[m] != rec:
        raise RecordError(f"{where}: a second, different record for {n}x{k} at m = {m}")
    per_m[m] = rec


def _token(obj, where) -> int:
    m = _get(obj, "m", int, where)
    if not 1 <= m <= MAX_TOKENS:
        raise RecordError(f"{where}.m: {m} is not 1…{MAX_TOKENS}")
    return m


def parse(doc, where: str = "launches") -> Table:
    """Parses a launch document (already decoded from JSON)."""
    schema = _get(doc, "schema", str, where)
    if schema != LAUNCHES_SCHEMA:
        raise RecordError(f"{where}.schema: {schema!r}, want {LAUNCHES_SCHEMA} (sfsurgery plan --from turns a policy into one)")
    dt = _get(doc, "dtype", str, where)
    if dt not in _DTYPES:
        raise RecordError(f"{where}.dtype: {dt!r}, want BF16 or F16")
    table = Table(_DTYPES[dt], _get(doc, "device", str, where), _limits(_get(doc, "limits", dict, where), where), {})
    for i, s in enumerate(_get(doc, "shapes", list, where)):
        sw = f"{where}.shapes[{i}]"
        n, k = _shape(s, sw)
        for j, at in enumerate(_get(s, "launches", list, sw)):
            aw = f"{sw}.launches[{j}]"
            m = _token(at, aw)
            if at.get("launch") is None:
                continue  # the error says why there is none
            _add(table, n, k, m, parse_launch(at["launch"], n, k, m, aw + ".launch", table.limits), aw)
        if s.get("prefill") is not None:
            pf = parse_prefill(s["prefill"], n, k, table.dtype, table.limits, sw + ".prefill")
            if (n, k) in table.prefill and table.prefill[(n, k)] != pf:
                raise RecordError(f"{sw}.prefill: second, different prefill records for {n}x{k}")
            table.prefill[(n, k)] = pf
    return table


def check_device(table: Table, sms: int, shared_per_block: int, major: int, minor: int, name: str) -> None:
    """Refuses a table planned for other device limits than the GPU's."""
    lim = table.limits
    warpgroup = (major, minor) == (9, 0)
    if lim.sms != sms or lim.shared_per_block != shared_per_block or lim.warpgroup != warpgroup:
        raise RecordError(
            f"launch records planned for {table.device} ({lim.sms} SMs, {lim.shared_per_block} B shared per block, "
            f"warpgroup {lim.warpgroup}), this GPU is {name} ({sms} SMs, {shared_per_block} B, sm_{major}{minor}): "
            "run `sfsurgery plan` on this GPU"
        )
