#!/usr/bin/env python3
"""serve.py: end-to-end serving benchmark of an ampere checkpoint against
its dense model, in Hugging Face transformers, the way a transformers user
serves: generate() with a static KV cache, whose decode step transformers
compiles with torch.compile (mode reduce-overhead: CUDA graphs).

    python3 bench/serve.py --sparse DIR_2of4 --dense DIR_DENSE --out OUT.json \\
        [--batches 1,8,32,64] [--prompt 512] [--new 256]

DIR_2of4 is `sfsurgery prune --format ampere` of DIR_DENSE (bench/serve.sh
makes both). Both models are loaded at once; per batch it measures each,
alternately (sparse, dense, dense, sparse; the best of the visits):
time to first token (prefill and one token, eager), decode tokens/s (the
rest), and the working memory generate adds to the weights; and, with
CUDA graphs, the time of one layer's projections at M = batch, dense
(torch) and sparse (ours) — which gives the projections' share of a dense
decode step and their speedup, and from those the Amdahl bound on the
end-to-end speedup. The dense model's projections are then set to the
pruned weights (decoded from DIR_2of4 by
our kernel, the bytes of `sfsurgery prune --format dense`) to check the
sparse model's logits on a teacher-forced prompt and its greedy tokens.
OUT.json is written after every batch (atomically), so a run stopped
early keeps the batches it finished; the times each part took are
printed.
"""

import argparse
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import sfsurgery  # noqa: E402  (registers the quantizer)
from sfsurgery import SparseLinear, SparseMLP, layout, ops  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from serve_table import summary_row, write  # noqa: E402  (this directory, sys.path[0] when run as a script)

# SCHEMA names the layout of the JSON this writes (python/tests/test_docs.py
# reads the committed ones).
SCHEMA = "sfsurgery-serve/1"


def weight_bytes(model):
    """Bytes of the model's parameters and persistent buffers."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def projection_bytes(model):
    """Bytes of the projections (nn.Linear or SparseLinear) inside the
    decoder layers."""
    total = 0
    for name, m in model.named_modules():
        if ".layers." not in name:
            continue
        if isinstance(m, SparseLinear):
            total += sum(t.numel() * t.element_size() for t in (m.packed, m.meta) + ((m.bias,) if m.bias is not None else ()))
        elif isinstance(m, torch.nn.Linear):
            total += sum(p.numel() * p.element_size() for p in m.parameters())
    return total


def generate_times(model, ids, new, warm=2, reps=3, ttft_reps=10):
    """(time to first token, decode tokens/s, decode step time, every
    one-token generation's time) of generate on ids after warm runs (the first compiles and records the CUDA
    graphs): the time to first token the best of ttft_reps one-token
    generations (cheap, and at batch 1 bound by the host's launches, whose
    time varies from run to run), the whole generation the best of reps."""
    gen = dict(do_sample=False, cache_implementation="static")
    b = ids.shape[0]
    for _ in range(warm):
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **gen)
    torch.cuda.synchronize()
    ttft = []
    for _ in range(ttft_reps):
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, **gen)
        torch.cuda.synchronize()
        ttft.append(time.perf_counter() - t0)
    full = []
    for _ in range(reps):
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **gen)
        torch.cuda.synchronize()
        full.append(time.perf_counter() - t0)
    t1, tn = min(ttft), min(full)
    return t1, b * (new - 1) / (tn - t1), (tn - t1) / (new - 1), ttft


def layer_projections(model):
    """The projection modules of decoder layer 0, as the model runs them."""
    layer = model.model.layers[0]
    att, mlp = layer.self_attn, layer.mlp
    if hasattr(att, "qkv"):
        mods = [att.qkv, att.o_proj]
    else:
        mods = [att.q_proj, att.k_proj, att.v_proj, att.o_proj]
    if isinstance(mlp, SparseMLP):
        mods += [mlp.gate_up, mlp.down_proj]
    else:
        mods += [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    return mods


def projection_time(mods, m, reps=50):
    """Seconds for one pass of mods at M = m tokens, each on an input of its
    own size, captured in one CUDA graph and replayed."""
    dt = mods[0].packed.dtype if isinstance(mods[0], SparseLinear) else mods[0].weight.dtype
    xs = [torch.randn((m, mod.in_features), device="cuda", dtype=dt) for mod in mods]
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for mod, x in zip(mods, xs):
                mod(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                for mod, x in zip(mods, xs):
                    mod(x)
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3 / reps)
    return best


def measure(models, batches, prompt, new, seed, order=("sparse", "dense", "dense", "sparse"), ttft_reps=10):
    """Per batch and model: time to first token, decode tokens/s and step
    time (the best of the visits in order, both models loaded, so that a
    drift of the GPU's clocks hits both), the working memory generate adds
    to the weights at its peak, and the projections' time (CUDA graphs)."""
    rows = {name: {} for name in models}
    vocab = next(iter(models.values())).config.vocab_size
    seen = set()
    for b in batches:
        ids = torch.randint(3, vocab, (b, prompt), device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + b))
        for name in order:
            model = models[name]
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            warm = 2 if (name, b) not in seen else 1
            seen.add((name, b))
            ttft, tps, step, runs = generate_times(model, ids, new, warm=warm, reps=2, ttft_reps=ttft_reps)
            work = torch.cuda.max_memory_allocated() - base
            r = rows[name].setdefault(b, dict(ttft_s=ttft, decode_tok_s=tps, step_s=step, work_bytes=work, visits=[]))
            r["visits"].append(dict(ttft_s=ttft, ttft_runs_s=runs, decode_tok_s=tps))
            r["ttft_s"], r["decode_tok_s"] = min(r["ttft_s"], ttft), max(r["decode_tok_s"], tps)
            r["step_s"], r["work_bytes"] = min(r["step_s"], step), max(r["work_bytes"], work)
        for name, model in models.items():
            r = rows[name][b]
            r["projections_s"] = projection_time(layer_projections(model), b) * model.config.num_hidden_layers
            print(f"  {name} batch {b}: ttft {r['ttft_s'] * 1e3:.1f} ms, decode {r['decode_tok_s']:.1f} tok/s "
                  f"(visits {', '.join('%.1f' % v['decode_tok_s'] for v in r['visits'])}), step {r['step_s'] * 1e3:.2f} ms, "
                  f"projections {r['projections_s'] * 1e3:.2f} ms, working memory {r['work_bytes'] / 2**30:.1f} GiB", flush=True)
    return rows


def set_pruned(dense, sparse_dir):
    """Sets the dense model's projections to the pruned weights: our
    kernel's decode of the ampere checkpoint's packed + meta."""
    from safetensors import safe_open

    q = layout.sparse_config(layout.read_config(sparse_dir))
    targets = set(q["targets"])
    tensors = layout.read_tensors(sparse_dir)
    with torch.no_grad():
        for f in sorted({t.path for t in tensors.values()}):
            with safe_open(f, "pt", device="cuda") as st:
                for key in st.keys():
                    if key.endswith(".packed") and key[:-7] in targets:
                        mod = key[:-7]
                        w = ops.decode(st.get_tensor(key), st.get_tensor(mod + ".meta"))
                        dense.get_submodule(mod).weight.copy_(w)


def check(sparse, dense, seed, tokens=64):
    """The sparse model against the dense pruned one: teacher-forced logits
    of a sequence of `tokens` (≤ 64: every projection by our decode kernels;
    a longer one would take the prefill path) as
    a relative error; greedy generation of 32 tokens from it, as the length
    of the equal prefix; and where they part, the dense model's gap between
    its two best logits there (random weights give near-ties)."""
    vocab = sparse.config.vocab_size
    ids = torch.randint(3, vocab, (1, tokens), device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    with torch.no_grad():
        a = sparse(ids).logits.float()
        b = dense(ids).logits.float()
    rel = ((a - b).norm() / b.norm()).item()
    gen = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, disable_compile=True,
               output_scores=True, return_dict_in_generate=True)
    g1 = sparse.generate(ids, **gen).sequences[0, tokens:]
    r2 = dense.generate(ids, **gen)
    g2 = r2.sequences[0, tokens:]
    same = int((g1 == g2).long().cumprod(0).sum().item())
    gap = None
    if same < len(g2):
        top = r2.scores[same][0].float().topk(2).values
        gap = (top[0] - top[1]).item()
    return rel, same, gap


def prefill_alt(sparse, mode, batches, prompt, seed):
    """Time to first token with SparseLinear's prefill path `mode`
    ("decode": the weight decoded to dense per call, then torch's matmul;
    "cusparselt": a second, compressed copy of every weight), the bytes of
    such copies, and the prompt's logits against those of the model's own
    prefill path; every module goes back to its own path after."""
    lins = [m for m in sparse.modules() if isinstance(m, SparseLinear)]
    table = ops.table(lins[0].table_id)
    own = [m.prefill for m in lins]
    vocab = sparse.config.vocab_size
    ids = torch.randint(3, vocab, (1, prompt), device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    with torch.no_grad():
        b = sparse(ids).logits.float()
    try:
        for m in lins:
            m.attach(table, mode)
        copies = sum(m.cslt.numel() * m.cslt.element_size() for m in lins if m.cslt is not None)
        res = dict(prefill=mode, copy_bytes=copies, ttft_s={})
        gen = dict(do_sample=False, cache_implementation="static", max_new_tokens=1, min_new_tokens=1)
        for bs in batches:
            x = torch.randint(3, vocab, (bs, prompt), device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + bs))
            sparse.generate(x, **gen)
            best = float("inf")
            for _ in range(3):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                sparse.generate(x, **gen)
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t0)
            res["ttft_s"][bs] = best
            print(f"  {mode} prefill, batch {bs}: ttft {best * 1e3:.1f} ms", flush=True)
        with torch.no_grad():
            a = sparse(ids).logits.float()
    finally:
        for m, p in zip(lins, own):
            m.attach(table, p)
    res["prefill_logits_rel_error_vs_own"] = ((a - b).norm() / b.norm()).item()
    print(f"  {mode} prefill logits ({prompt} tokens) against the model's own prefill ({own[0]}): rel. error "
          f"{res['prefill_logits_rel_error_vs_own']:.2e}; copies {copies / 2**30:.2f} GiB", flush=True)
    return res


def reference(sparse, dense, seed, tokens=64):
    """The noise floor of bf16 inference on this model: teacher-forced
    logits of the sparse and of the dense (pruned) model, each against the
    dense pruned model run in float32."""
    vocab = sparse.config.vocab_size
    ids = torch.randint(3, vocab, (1, tokens), device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    with torch.no_grad():
        a = sparse(ids).logits.float()
        b = dense(ids).logits.float()
        dense.float()
        r = dense(ids).logits.float()
        dense.to(torch.bfloat16)
    rel = lambda x: ((x - r).norm() / r.norm()).item()  # noqa: E731
    return dict(sparse_vs_f32=rel(a), dense_vs_f32=rel(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sparse", required=True, help="the ampere checkpoint")
    ap.add_argument("--dense", required=True, help="the dense checkpoint it was pruned from")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ttft-reps", type=int, default=10,
                    help="one-token generations a visit, the time to first token their best")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cusparselt", action="store_true", help="also time prefill through cuSPARSELt (a second weight copy)")
    ap.add_argument("--decode-prefill", action="store_true",
                    help="also time prefill with the weight decoded to dense per call (the path without our prefill kernel)")
    ap.add_argument("--reference", action="store_true", help="also compare both models' logits with the dense model in float32")
    a = ap.parse_args()
    if a.ttft_reps < 1:
        ap.error(f"--ttft-reps {a.ttft_reps}: want at least 1")
    batches = [int(b) for b in a.batches.split(",")]
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.split("\n")[0].strip()
    except OSError:
        driver = ""
    env = dict(gpu=torch.cuda.get_device_name(), driver=driver,
               torch=torch.__version__, transformers=__import__("transformers").__version__,
               cuda=torch.version.cuda, sfsurgery_python=sfsurgery.__version__)
    out = dict(schema=SCHEMA, label=a.label, sparse=a.sparse, dense=a.dense, prompt=a.prompt, new=a.new, ttft_reps=a.ttft_reps, env=env)

    for knob in ("recompile_limit", "cache_size_limit"):  # two models, several batch sizes
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    t0 = time.perf_counter()
    sparse = AutoModelForCausalLM.from_pretrained(a.sparse, device_map="cuda")
    out["sparse_load_s"] = time.perf_counter() - t0
    dense = AutoModelForCausalLM.from_pretrained(a.dense, device_map="cuda", dtype=torch.bfloat16)
    for name, m in (("sparse", sparse), ("dense", dense)):
        out[f"{name}_weight_bytes"] = weight_bytes(m)
        out[f"{name}_projection_bytes"] = projection_bytes(m)
    print(f"weights: sparse {out['sparse_weight_bytes'] / 2**30:.2f} GiB, dense {out['dense_weight_bytes'] / 2**30:.2f} GiB; "
          f"projections {out['sparse_projection_bytes'] / out['dense_projection_bytes']:.1%} of dense", flush=True)
    print(f"loaded in {time.perf_counter() - t0:.0f} s", flush=True)
    # One batch at a time, the result written after each: a run stopped
    # early (a GPU host's time limit) keeps the batches it finished.
    out["sparse_rows"], out["dense_rows"], out["summary"] = {}, {}, []
    out["sparse_prefill"] = sparse_prefill(sparse)
    for b in batches:
        t1 = time.perf_counter()
        rows = measure(dict(sparse=sparse, dense=dense), [b], a.prompt, a.new, a.seed, ttft_reps=a.ttft_reps)
        s, d = rows["sparse"][b], rows["dense"][b]
        out["sparse_rows"][b], out["dense_rows"][b] = s, d
        row = summary_row(b, s, d, {})
        out["summary"].append(row)
        write(a.out, out)
        median = f"; the calls' medians {row['ttft_median_ratio']:.2f}x" if "ttft_median_ratio" in row else ""
        print(f"batch {b}: decode {row['decode_speedup']:.3f}x dense (Amdahl bound {row['amdahl']:.3f}x: share "
              f"{row['share']:.2f}, projections {row['projection_speedup']:.2f}x; {row['of_bound']:.1%} of the bound); "
              f"ttft {row['ttft_ratio']:.2f}x ({sparse_prefill(sparse)} prefill{median}); {time.perf_counter() - t1:.0f} s",
              flush=True)
    alts = {}
    for mode, asked in (("decode", a.decode_prefill), ("cusparselt", a.cusparselt)):
        if not asked:
            continue
        key = "decode_prefill" if mode == "decode" else "cusparselt"
        try:
            out[key] = prefill_alt(sparse, mode, batches, a.prompt, a.seed)
            alts[key] = out[key]
        except Exception as e:  # reported, and the rest still measured
            out[key] = dict(error=f"{type(e).__name__}: {e}")
            print(f"  {mode} prefill: {out[key]['error']}", flush=True)
    if alts:
        out["summary"] = [summary_row(b, out["sparse_rows"][b], out["dense_rows"][b], alts) for b in batches]
        write(a.out, out)
        for row in out["summary"]:
            print(f"batch {row['batch']}: ttft " + ", ".join(f"with {k} {row['ttft_ratio_' + k]:.2f}x" for k in alts
                                                           if "ttft_ratio_" + k in row), flush=True)

    set_pruned(dense, a.sparse)
    rel, same, gap = check(sparse, dense, a.seed)
    out["logits_rel_error"], out["greedy_same_tokens"], out["greedy_gap_at_parting"] = rel, same, gap
    print(f"teacher-forced logits (64 tokens) rel. error {rel:.2e}; greedy: first {same} of 32 tokens the same"
          + (f" (dense top-2 logit gap where they part: {gap:.3g})" if gap is not None else ""), flush=True)

    if a.reference:
        out["reference"] = reference(sparse, dense, a.seed)
        print(f"logits against the dense pruned model in float32: sparse {out['reference']['sparse_vs_f32']:.2e}, "
              f"dense bf16 {out['reference']['dense_vs_f32']:.2e}", flush=True)
    write(a.out, out)
    print(f"done in {time.perf_counter() - t0:.0f} s", flush=True)


def sparse_prefill(model) -> str:
    """The prefill path of the model's projections (SparseLinear.prefill)."""
    return next(m.prefill for m in model.modules() if isinstance(m, SparseLinear))


if __name__ == "__main__":
    main()
