#!/usr/bin/env python3
"""serve_table.py RESULT.json...: the results tables of the serving
documents (docs/serve-*.md) from bench/serve.py's results, as Markdown on
standard output (standard library only, so it runs anywhere the JSON is).

Per result: a line naming the model shape (--title, else the result's
label), the weights of both models and the projections' bytes of 2:4
against dense, then a row per batch: decode tokens/s of each, the decode
speedup, the projections' share of a dense decode step and their speedup,
the Amdahl bound and the fraction of it reached, time to first token of
each (the 2:4 model's through its prefill path, and through every other
path the run timed, each with its ratio to dense; an alternative that failed in the run has
no column), where the result keeps every one-token call's time (serve.py
--ttft-reps) the medians of those calls and their ratio (a host-bound
prefill moves from call to call, and a best of a few calls with it), and
the working memory generate added to the weights ("—" where the result
does not have it).

serve.py also takes from here what a result holds besides its
measurements: the summary row of a batch (`summary_row`) and the atomic
write it makes after every batch (`write`), so that a run stopped early
keeps the batches it finished (python/tests/test_serve_table.py).
"""

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List, Optional

SCHEMA = "sfsurgery-serve/1"
GIB = 2**30
# The 2:4 model's prefill paths as serve.py names them: the package's own
# ("sparse_prefill") and the alternatives it can time beside it.
PREFILL = {"ours": "prefill kernel", "decode": "decode to dense", "cusparselt": "cuSPARSELt"}
ALTERNATIVES = ("decode_prefill", "cusparselt")


class ResultError(Exception):
    """A result file that is not bench/serve.py's."""


def load(path: str) -> Dict:
    """Reads a serve.py result; raises ResultError for anything else."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        raise ResultError(f"{path}: {e}") from None
    if not isinstance(r, dict) or r.get("schema") != SCHEMA:
        raise ResultError(f"{path}: not a {SCHEMA} result of bench/serve.py")
    for key in ("sparse_rows", "dense_rows", "summary", "sparse_weight_bytes", "dense_weight_bytes",
                "sparse_projection_bytes", "dense_projection_bytes"):
        if key not in r:
            raise ResultError(f"{path}: no {key!r}")
    if set(r["sparse_rows"]) != set(r["dense_rows"]):
        raise ResultError(f"{path}: batches {_batches(r['sparse_rows'])} of the 2:4 model, {_batches(r['dense_rows'])} of dense")
    return r


def _batches(rows: Dict) -> List[str]:
    return sorted(rows, key=lambda b: (len(b), b))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def ttft_median(row: Dict) -> Optional[float]:
    """The median of every one-token call's time a model's batch row
    keeps (its visits' ttft_runs_s), or None where it keeps none."""
    runs = [t for v in row.get("visits", []) for t in v.get("ttft_runs_s", [])]
    return statistics.median(runs) if runs else None


def summary_row(b: int, s: Dict, d: Dict, alternatives: Dict[str, Dict]) -> Dict:
    """The summary of batch b from the 2:4 model's row s and dense's row
    d: the projections' share of a dense decode step and their speedup,
    the Amdahl bound they give, the decode speedup and the fraction of the
    bound it reaches, the time to first token's ratio (best call), that of
    the calls' medians where both rows keep them, and the ratio through
    each alternative prefill path (key: its result, with ttft_s per
    batch) that timed b."""
    share = d["projections_s"] / d["step_s"]
    speed = d["projections_s"] / s["projections_s"]
    bound = 1 / ((1 - share) + share / speed)
    ratio = s["decode_tok_s"] / d["decode_tok_s"]
    row = dict(batch=b, share=share, projection_speedup=speed, amdahl=bound, decode_speedup=ratio,
               of_bound=ratio / bound, ttft_ratio=d["ttft_s"] / s["ttft_s"])
    md, ms = ttft_median(d), ttft_median(s)
    if md and ms:
        row["ttft_median_ratio"] = md / ms
    for key, alt in alternatives.items():
        t = alt.get("ttft_s", {}).get(b) if isinstance(alt, dict) else None
        if t:
            row[f"ttft_ratio_{key}"] = d["ttft_s"] / t
    return row


def write(path: str, result: Dict) -> None:
    """Writes result as JSON to path through a temporary file beside it
    (made as open() makes files, so the umask sets its mode), renamed over
    path: a reader sees the previous result or this one, never part of
    one."""
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def table(r: Dict, title: Optional[str] = None) -> str:
    """The Markdown of one result: its title line and its table."""
    head = (f"{title or r.get('label', '')} (weights: dense {r['dense_weight_bytes'] / GIB:.2f} GiB, "
            f"2:4 {r['sparse_weight_bytes'] / GIB:.2f} GiB; the projections "
            f"{r['sparse_projection_bytes'] / r['dense_projection_bytes']:.1%} of dense):")
    own = r.get("sparse_prefill")
    # The alternatives timed beside the model's own prefill path, each once.
    alts = [(k, r[k]) for k in ALTERNATIVES
            if isinstance(r.get(k), dict) and "ttft_s" in r[k] and r[k].get("prefill", k) != own]
    cols = ["batch", "dense tok/s", "2:4 tok/s", "decode speedup", "projections share, speedup", "Amdahl bound",
            "of the bound", "TTFT dense", f"TTFT 2:4 ({PREFILL.get(own, own)})" if own else "TTFT 2:4"]
    cols += [f"TTFT 2:4 ({PREFILL.get(alt.get('prefill', k), alt.get('prefill', k))})" for k, alt in alts]
    # The medians' column where every batch of both models kept its calls.
    medians = all(ttft_median(r[m][b]) is not None for m in ("sparse_rows", "dense_rows") for b in r["sparse_rows"])
    if medians:
        cols.append("TTFT median of the calls, dense and 2:4")
    cols.append("working memory dense, 2:4")
    lines = [head, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    summary = {str(row["batch"]): row for row in r["summary"]}
    for b in _batches(r["sparse_rows"]):
        s, d, row = r["sparse_rows"][b], r["dense_rows"][b], summary.get(b)
        if row is None:
            raise ResultError(f"batch {b}: no summary row")
        cells = [b, f"{d['decode_tok_s']:.1f}", f"{s['decode_tok_s']:.1f}", f"**{row['decode_speedup']:.2f}x**",
                 f"{row['share']:.2f}, {row['projection_speedup']:.2f}x", f"{row['amdahl']:.2f}x", f"{row['of_bound']:.0%}",
                 _ms(d["ttft_s"]), f"{_ms(s['ttft_s'])} ({d['ttft_s'] / s['ttft_s']:.2f}x)"]
        for _, alt in alts:
            t = alt["ttft_s"].get(b)
            cells.append(f"{_ms(t)} ({d['ttft_s'] / t:.2f}x)" if t else "—")
        if medians:
            md, ms = ttft_median(d), ttft_median(s)
            cells.append(f"{md * 1e3:.1f}, {_ms(ms)} ({md / ms:.2f}x)")
        cells.append(f"{d['work_bytes'] / GIB:.1f}, {s['work_bytes'] / GIB:.1f} GiB" if "work_bytes" in d and "work_bytes" in s else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="serve_table.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", metavar="RESULT.json", help="results of bench/serve.py")
    ap.add_argument("--title", action="append", default=[], metavar="TITLE",
                    help="the title of each result's table, in order (default its label)")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    if len(a.title) > len(a.results):
        print(f"serve_table.py: {len(a.title)} titles for {len(a.results)} results", file=sys.stderr)
        return 2
    out = []
    for i, path in enumerate(a.results):
        try:
            r = load(path)
        except ResultError as e:
            print(f"serve_table.py: {e}", file=sys.stderr)
            return 2
        try:
            out.append(table(r, a.title[i] if i < len(a.title) else None))
        except (ResultError, KeyError, TypeError, ValueError, AttributeError, OverflowError, ZeroDivisionError) as e:
            what = str(e) if isinstance(e, ResultError) else f"malformed result ({type(e).__name__}: {e})"
            print(f"serve_table.py: {path}: {what}", file=sys.stderr)
            return 2
    sys.stdout.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
