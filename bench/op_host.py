#!/usr/bin/env python3
"""op_host.py: what one eager call of our linear costs the host, against
PyTorch's dense linear of the same shape, per shape and token count.

    python3 bench/op_host.py [--shapes 4096x4096,...] [--tokens 1,16,512,2048]
        [--dtype bf16] [--calls 100] [--reps 21] [--activations 8]
        [--json OUT] [--no-profile] [--parts]
        [--package DIR]

Per shape n x k (out x in features; default Llama-3-8B's q/o, k/v, stacked
qkv, stacked gate/up and down) and token count m, on activations x of
[1, m, k] under torch.no_grad(), host microseconds per call of:

- F.linear: torch.nn.functional.linear(x, W) on the dense weight (aten);
- nn.Linear: the dense nn.Linear module called;
- op: torch.ops.sfsurgery.linear(x, packed, meta, None, table), through
  the dispatcher;
- SparseLinear: the SparseLinear module called (in eager mode its forward
  launches the prepared launch without the dispatcher).

Each call takes the next of `activations` tensors x (default 8, each at
its own address), as a weight in a model's forward gets another
activation buffer than the call before it got: a path that prepares
something per activation (our prefill launch encodes x's tensor map for
its address and m) pays for it as it would there; with --activations 1
every call takes the same x.

Method: a loop is `calls` calls of one of the four, timed on the host
(time.perf_counter_ns) while the GPU is kept busy (torch.cuda._sleep,
calibrated, for longer than the loop; a loop whose sleep ended before the
loop did is timed again with a longer one), so that no call waits for
the GPU; then the GPU is synchronized. Each of `reps` rounds times one
loop of each of the four, in an order rotated by one every round, so that
the host's drift over the run falls on all four alike. A time is the
median of its loops; a ratio is the median over the rounds of the ratio
of the two loops of the same round. With --parts, where the op runs our
kernels, the parts of its call are timed the same way, each alone in its
loop (PARTS): what it costs the host to allocate y as the op does, to
check the weight's arguments, to launch the prepared launch with one x
and with the next of the activations (the prefill kernel's tensor map
encoded for each), and the loop itself. Then, unless
--no-profile, torch.profiler (CPU and CUDA activities, as a trace of a
model's forward is taken) records the same calls, each in a
record_function range, and the CPU time per call of each range and of
aten::mm and sfsurgery::linear is reported. The headline is the ratios:
op / F.linear and SparseLinear / nn.Linear (at most 1 is the target).

The weights are random dense weights pruned 2:4 (the two largest of each
four), packed by PyTorch's CUTLASS conversion, planned by `sfsurgery
plan` for this GPU (the binary from $SFSURGERY_BIN or PATH). --package
runs another checkout's sfsurgery (its python/ directory) the same way,
to set a change beside what it replaced (with that checkout's binary
where the launch documents differ). Needs torch and a CUDA GPU; the
argument parsing and the table need neither
(python/tests/test_op_host.py).
"""

import argparse
import itertools
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.normpath(os.path.join(HERE, "..", "python"))

SCHEMA = "sfsurgery-op-host/2"
# Llama-3-8B's projections (n, k) as the package runs them: q and o, k and
# v, q/k/v stacked, gate/up stacked, down.
SHAPES = [(4096, 4096), (1024, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]
TOKENS = [1, 16, 512, 2048]
# What is timed, in the table's order: (key, column header).
CALLS = [("linear", "F.linear"), ("nn_linear", "nn.Linear"), ("op", "op"), ("module", "SparseLinear")]
# The ratios: (key, numerator, denominator, column header).
RATIOS = [("op_vs_linear", "op", "linear", "op/F.linear"), ("module_vs_nn_linear", "module", "nn_linear", "SparseLinear/nn.Linear")]
# The parts of an op call that --parts times: (key, header).
PARTS = [("alloc", "alloc y"), ("checks", "checks"), ("launch", "launch"), ("launch_new_x", "launch, new x"),
         ("loop", "loop")]
# The profiler's keys per call: the record_function ranges of the calls
# (bench::KEY) and the operators inside them.
PROFILED_OPS = ["aten::linear", "aten::matmul", "aten::mm", "sfsurgery::linear", "sfsurgery::linear (direct)"]


class PlanError(Exception):
    """The planner is missing or failed."""


def positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not positive")
    return v


def parse_shapes(s: str) -> List[Tuple[int, int]]:
    """Parses "NxK,NxK,…" (out x in features; the kernels need n % 32 == 0
    and k % 64 == 0)."""
    out = []
    for part in s.split(","):
        nk = part.strip().lower().split("x")
        if len(nk) != 2 or not all(p.isdigit() for p in nk):
            raise argparse.ArgumentTypeError(f"shape {part.strip()!r}: want NxK, e.g. 4096x14336")
        n, k = int(nk[0]), int(nk[1])
        if n < 32 or k < 64 or n % 32 or k % 64:
            raise argparse.ArgumentTypeError(f"shape {n}x{k}: the kernels need n % 32 == 0 and k % 64 == 0")
        out.append((n, k))
    return out


def parse_tokens(s: str) -> List[int]:
    """Parses "M,M,…" (token counts, each at least 1)."""
    return [positive(p.strip()) for p in s.split(",")]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="op_host.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=parse_shapes, default=SHAPES, help="NxK,… (default Llama-3-8B's projections)")
    ap.add_argument("--tokens", type=parse_tokens, default=TOKENS, help="token counts m (default 1,16,512,2048)")
    ap.add_argument("--dtype", choices=("bf16", "f16"), default="bf16")
    ap.add_argument("--calls", type=positive, default=100, help="calls per timed loop")
    ap.add_argument("--reps", type=positive, default=21, help="rounds, each one timed loop of every call (medians are reported)")
    ap.add_argument("--activations", type=positive, default=8,
                    help="activation tensors the calls take in turn (default 8; 1: every call the same x)")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    ap.add_argument("--no-profile", action="store_true", help="skip the torch.profiler run")
    ap.add_argument("--parts", action="store_true", help="also time the parts of an op call (module doc)")
    ap.add_argument("--package", default=PACKAGE, metavar="DIR",
                    help="the directory to import sfsurgery from (default this repository's python/; another checkout's to compare)")
    return ap


def medians(samples: Dict[str, List[float]]) -> Dict[str, float]:
    """Per call key, the median of its loops' µs per call."""
    return {key: statistics.median(v) for key, v in samples.items() if v}


def ratios(samples: Dict[str, List[float]]) -> Dict[str, Optional[float]]:
    """The headline ratios of one row: per ratio, the median over the
    rounds of numerator / denominator of the same round (samples holds
    each call key's µs per call, one per round; None where either key
    has no rounds or a denominator is 0)."""
    out: Dict[str, Optional[float]] = {}
    for key, num, den, _ in RATIOS:
        a, b = samples.get(num) or [], samples.get(den) or []
        pairs = [x / y for x, y in zip(a, b) if y]
        out[key] = statistics.median(pairs) if pairs else None
    return out


def _cell(v: Optional[float], fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render(doc: dict) -> str:
    """The results as a text table: per row the times, the ratios and what
    ran; then the largest ratio of each kind."""
    head = ["shape", "m"] + [h for _, h in CALLS] + [h for *_, h in RATIOS] + ["path"]
    rows = []
    for r in doc["rows"]:
        rows.append([f"{r['n']}x{r['k']}", str(r["m"])] + [_cell(r["us"].get(k), ".1f") for k, _ in CALLS]
                    + [_cell(r["ratio"].get(k), ".2f") for k, *_ in RATIOS] + [r["path"]])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    lines = [f"{doc['device']}, torch {doc['torch']}, {doc['dtype']}, x [1, m, k] (calls take {doc.get('activations', 1)} in turn), no_grad; "
             f"host µs per call, median of {doc['reps']} rounds of a {doc['calls']}-call loop each; ratios paired by round"
             + (f"; sfsurgery from {doc['package']}" if doc.get("package") else "")]
    for row in [head] + rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    for key, *_, header in RATIOS:
        got = [(r["ratio"][key], r) for r in doc["rows"] if r["ratio"].get(key) is not None]
        if got:
            v, r = max(got, key=lambda t: t[0])
            lines.append(f"largest {header}: {v:.2f} ({r['n']}x{r['k']}, m = {r['m']})")
    if any(r.get("parts_us") for r in doc["rows"]):
        lines.append("")
        lines.append("parts of an op call, host µs each timed alone in its loop (--parts), beside the whole op:")
        for r in doc["rows"]:
            p = r.get("parts_us")
            if p:
                parts = ", ".join(f"{h} {p[key]:.1f}" for key, h in PARTS if p.get(key) is not None)
                lines.append(f"  {r['n']}x{r['k']} m={r['m']}: {parts}; op {_cell(r['us'].get('op'), '.1f')}")
    if any(r.get("profiler_us") for r in doc["rows"]):
        lines.append("")
        lines.append("torch.profiler, CPU µs per call (self + children) of each call's range [and of the operators in it]:")
        for r in doc["rows"]:
            parts = []
            for key, header in CALLS:
                p = (r.get("profiler_us") or {}).get(key)
                if not p or p.get(f"bench::{key}") is None:
                    continue
                inner = ", ".join(f"{op} {p[op]:.1f}" for op in PROFILED_OPS if p.get(op) is not None)
                parts.append(f"{header} {p[f'bench::{key}']:.1f}" + (f" [{inner}]" if inner else ""))
            lines.append(f"  {r['n']}x{r['k']} m={r['m']}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def write_json(path: str, doc: dict) -> None:
    """Writes doc to path through a temporary file beside it."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".op_host-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


# Everything below needs torch and a GPU.


def sleep_rate() -> float:
    """torch.cuda._sleep's cycles per microsecond on this GPU."""
    import torch

    cycles = 20_000_000
    torch.cuda._sleep(1000)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    b.synchronize()
    return cycles / (a.elapsed_time(b) * 1000)


def rotations(keys: Sequence[str], reps: int) -> List[List[str]]:
    """The order of the loops in each of reps rounds: keys rotated left by
    one more every round."""
    n = len(keys)
    return [[keys[(r + i) % n] for i in range(n)] for r in range(reps)] if n else [[] for _ in range(reps)]


def host_us(fns: Dict[str, Callable[[], object]], calls: int, reps: int, rate: float) -> Dict[str, List[float]]:
    """Per call key, the host µs per call of each of reps rounds, a round
    being one loop of calls of each fn in rotated order, each loop with
    the GPU kept busy past its end (module doc)."""
    import torch

    cover: Dict[str, float] = {}
    for key, fn in fns.items():
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        cover[key] = 3 * (time.perf_counter_ns() - t0) / 1000 + 2000  # µs, from an untimed loop
        torch.cuda.synchronize()
    samples: Dict[str, List[float]] = {key: [] for key in fns}
    for order in rotations(list(fns), reps):
        for key in order:
            fn = fns[key]
            for tries in range(21):
                torch.cuda._sleep(int(cover[key] * rate))
                busy = torch.cuda.Event()
                busy.record()
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    fn()
                t1 = time.perf_counter_ns()
                covered = not busy.query()
                torch.cuda.synchronize()
                if covered:
                    samples[key].append((t1 - t0) / 1000 / calls)
                    break
                cover[key] *= 2
            else:
                raise RuntimeError(f"{key}: the GPU went idle before the timed loop ended 21 times (sleep {cover[key]:.0f} µs)")
    return samples


def profiled_us(fns: Dict[str, Callable[[], object]], calls: int, rate: float) -> Dict[str, Dict[str, float]]:
    """Per call key: the profiler's CPU µs per call (self + children) of
    its range bench::KEY and of PROFILED_OPS inside it."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    out = {}
    for key, fn in fns.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        label = f"bench::{key}"
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(int(rate * 50_000))
            for _ in range(calls):
                with record_function(label):
                    fn()
            torch.cuda.synchronize()
        out[key] = cpu_per_call(prof.key_averages(), [label] + PROFILED_OPS, calls)
    return out


def cpu_per_call(events, keys: Sequence[str], calls: int) -> Dict[str, float]:
    """The CPU µs per call (cpu_time_total / calls) of the profiler's
    averaged events whose key is one of keys. A record_function range that
    contains kernels is averaged twice under its key (its CPU range and its
    annotation on the GPU's timeline, with no CPU time): the larger
    counts."""
    got: Dict[str, float] = {}
    for e in events:
        if e.key in keys:
            got[e.key] = max(got.get(e.key, 0.0), e.cpu_time_total / calls)
    return got


def sparse_weight(n: int, k: int, dtype, gen):
    """A random dense weight pruned 2:4 and its packed + meta as PyTorch's
    CUTLASS conversion writes them."""
    import torch
    from torch.sparse._semi_structured_conversions import sparse_semi_structured_from_dense_cutlass

    w = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    g = w.view(n, k // 4, 4)
    keep = g.abs().float().topk(2, dim=-1).indices
    w = (g * torch.zeros_like(g, dtype=torch.bool).scatter_(-1, keep, True)).view(n, k)
    packed, meta = sparse_semi_structured_from_dense_cutlass(w)
    return w, packed.contiguous(), meta.contiguous()


def plan(shapes: Sequence[Tuple[int, int]], dtype: str):
    """The launch records `sfsurgery plan` gives for shapes on this GPU,
    parsed by the package under test."""
    from sfsurgery import records

    exe = os.environ.get("SFSURGERY_BIN") or shutil.which("sfsurgery")
    if not exe:
        raise PlanError("op_host.py plans the launch records with the Go planner: put the sfsurgery binary on PATH or name it in $SFSURGERY_BIN")
    cmd = [exe, "plan", "--shapes", ",".join(f"{n}x{k}" for n, k in shapes), "--dtype", dtype, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise PlanError(f"{shlex.join(cmd)}: {last}")
    return records.parse(json.loads(r.stdout), where="sfsurgery plan")


def measure_shape(n: int, k: int, table, args, rate: float, gen) -> List[dict]:
    """The rows of one shape: its weights made, each token count timed."""
    import torch
    import torch.nn.functional as F

    from sfsurgery import SparseLinear, ops
    from sfsurgery.errors import RecordError
    from sfsurgery.records import MAX_TOKENS

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    w, packed, meta = sparse_weight(n, k, dtype, gen)
    dense = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=dtype)
    dense.weight.copy_(w)
    lin = SparseLinear(k, n, dtype=dtype, device="cuda")
    lin.packed.copy_(packed)
    lin.meta.copy_(meta)
    lin.attach(table)
    tid = lin.table_id
    rows = []
    for m in args.tokens:
        xs = [torch.randn((1, m, k), generator=gen, device="cuda", dtype=torch.float32).to(dtype) for _ in range(args.activations)]
        # Each call its own turn over xs (a cycle per call, so each of the
        # four sees every x in the same order).
        nx = {key: itertools.cycle(xs).__next__ for key in ("linear", "nn_linear", "op", "module")}
        fns = {
            "linear": lambda: F.linear(nx["linear"](), w),
            "nn_linear": lambda: dense(nx["nn_linear"]()),
            "op": lambda: ops.linear(nx["op"](), packed, meta, None, tid),
            "module": lambda: lin(nx["module"]()),
        }
        try:
            fns["op"]()
        except RecordError as e:  # m above the decode kernels without prefill records
            print(f"{n}x{k} m={m}: op not timed: {e}", file=sys.stderr)
            del fns["op"]
        if m <= lin.max_tokens:
            path = "decode kernel"
        elif m > MAX_TOKENS and lin.prefill == "ours":
            path = "prefill kernel"
        else:
            path = f"prefill {lin.prefill}"
        samples = host_us(fns, args.calls, args.reps, rate)
        us = medians(samples)
        row = {"n": n, "k": k, "m": m, "path": path, "us": us, "ratio": ratios(samples), "loops_us": samples}
        if args.parts and "op" in fns:
            row["parts_us"] = medians(host_us(part_fns(xs, packed, meta, tid, n, k, m), args.calls, args.reps, rate))
        if not args.no_profile:
            row["profiler_us"] = profiled_us(fns, args.calls, rate)
        rows.append(row)
        print(f"{n}x{k} m={m}: " + ", ".join(f"{key} {v:.1f} µs" for key, v in us.items()), file=sys.stderr)
    return rows


def part_fns(xs, packed, meta, tid: int, n: int, k: int, m: int) -> Dict[str, Callable[[], object]]:
    """The parts of an op call of packed + meta (registered table tid) on
    activations xs of m tokens, each a call to time (PARTS): through the
    package's own functions, as ops.linear calls them."""
    import torch

    from sfsurgery import ops

    x = xs[0]
    ordinal = x.get_device()
    launcher = ops._weight(tid, ordinal, n, k, packed.data_ptr(), meta.data_ptr(), 0).launcher(m)
    y = x.new_empty(x.shape[:-1] + (n,))
    yp, xp, stream = y.data_ptr(), x.data_ptr(), ops.stream(ordinal)
    nxp = itertools.cycle([t.data_ptr() for t in xs]).__next__
    parts = {
        "alloc": lambda: x.new_empty(x.shape[:-1] + (n,)),
        "checks": lambda: ops._check_linear(packed, meta, None, tid, ordinal, x.dtype),
        "launch": lambda: launcher(yp, xp, m, stream),
        "launch_new_x": lambda: launcher(yp, nxp(), m, stream),
        "loop": lambda: None,
    }
    torch.cuda.synchronize()
    return parts


def measure(args) -> dict:
    """Every shape and token count (module doc), as the JSON document."""
    import torch

    table = plan(args.shapes, args.dtype)
    rate = sleep_rate()
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = []
    with torch.no_grad():
        for n, k in args.shapes:
            rows += measure_shape(n, k, table, args, rate, gen)
            torch.cuda.empty_cache()
    return {"schema": SCHEMA, "device": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": args.dtype,
            "calls": args.calls, "reps": args.reps, "activations": args.activations, "package": os.path.abspath(args.package),
            "command": shlex.join(["python3"] + sys.argv), "rows": rows}


def run_on_gpu(prog: str, args, measure_fn: Callable[[object], dict], render_fn: Callable[[dict], str],
               errors: Tuple[type, ...] = ()) -> int:
    """A bench script's run after its arguments: sfsurgery imported from
    args.package, torch and a CUDA GPU required, measure_fn(args) printed
    through render_fn and written to args.json where given. A refusal or
    one of errors (or the package's SfsurgeryError) is one line on
    standard error, "PROG: why", and exit status 2."""
    if not os.path.isfile(os.path.join(args.package, "sfsurgery", "__init__.py")):
        print(f"{prog}: {args.package}: no sfsurgery package in it", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.abspath(args.package))
    try:
        import torch
    except ImportError:
        print(f"{prog}: needs torch (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(f"{prog}: needs a CUDA GPU", file=sys.stderr)
        return 2
    from sfsurgery.errors import SfsurgeryError

    try:
        doc = measure_fn(args)
    except (SfsurgeryError,) + errors as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render_fn(doc))
    if args.json:
        write_json(args.json, doc)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return run_on_gpu("op_host.py", parser().parse_args(argv), measure, render, (PlanError,))


if __name__ == "__main__":
    sys.exit(main())
