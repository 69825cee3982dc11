#!/usr/bin/env python3
"""serve.py: end-to-end serving benchmark of an ampere checkpoint against
its dense model, in Hugging Face transformers, the way a transformers user
serves: generate() with a static KV cache, whose decode step transformers
compiles with torch.compile (mode reduce-overhead: CUDA graphs).

    python3 bench/serve.py --sparse DIR_2of4 --dense DIR_DENSE --out OUT.json \\
        [--batches 1,8,32,64] [--prompt 512] [--new 256]

DIR_2of4 is `sfsurgery prune --format ampere` of DIR_DENSE (bench/serve.sh
makes both). Per batch it measures, for each model in the same process:
time to first token (prefill and one token, eager), decode tokens/s (the
rest), weight and peak GPU memory; and, with CUDA graphs, the time of one
layer's projections at M = batch, dense (torch) and sparse (ours) — which
gives the projections' share of a dense decode step and their speedup, and
from those the Amdahl bound on the end-to-end speedup. The dense model's
projections are then set to the pruned weights (decoded from DIR_2of4 by
our kernel, the bytes of `sfsurgery prune --format dense`) to check the
sparse model's logits on a teacher-forced prompt and its greedy tokens.
"""

import argparse
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import sfsurgery  # noqa: E402  (registers the quantizer)
from sfsurgery import SparseLinear, SparseMLP, layout, ops  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


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


def generate_times(model, ids, new):
    """(time to first token, decode tokens/s) of generate on ids."""
    gen = dict(do_sample=False, cache_implementation="static")
    b = ids.shape[0]
    for _ in range(2):  # compile, record the CUDA graphs
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **gen)
    torch.cuda.synchronize()
    ttft = []
    for _ in range(3):
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, **gen)
        torch.cuda.synchronize()
        ttft.append(time.perf_counter() - t0)
    full = []
    for _ in range(3):
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **gen)
        torch.cuda.synchronize()
        full.append(time.perf_counter() - t0)
    t1, tn = min(ttft), min(full)
    return t1, b * (new - 1) / (tn - t1), (tn - t1) / (new - 1)


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


def measure(model, batches, prompt, new, seed):
    """Per batch: ttft, tokens/s, step time, peak memory, projection time."""
    rows = {}
    vocab = model.config.vocab_size
    for b in batches:
        ids = torch.randint(3, vocab, (b, prompt), device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed + b))
        torch.cuda.reset_peak_memory_stats()
        ttft, tps, step = generate_times(model, ids, new)
        peak = torch.cuda.max_memory_allocated()
        proj = projection_time(layer_projections(model), b) * model.config.num_hidden_layers
        rows[b] = dict(ttft_s=ttft, decode_tok_s=tps, step_s=step, peak_bytes=peak, projections_s=proj)
        print(f"  batch {b}: ttft {ttft * 1e3:.1f} ms, decode {tps:.1f} tok/s, step {step * 1e3:.2f} ms, "
              f"projections {proj * 1e3:.2f} ms, peak {peak / 2**30:.1f} GiB", flush=True)
    return rows


def set_pruned(dense, sparse_dir):
    """Sets the dense model's projections to the pruned weights: our
    kernel's decode of the ampere checkpoint's packed + meta."""
    from safetensors import safe_open

    q = layout.sparse_config(layout.read_config(sparse_dir))
    targets = set(q["targets"])
    with torch.no_grad():
        for f in layout.checkpoint_files(sparse_dir):
            with safe_open(f, "pt", device="cuda") as st:
                for key in st.keys():
                    if key.endswith(".packed") and key[:-7] in targets:
                        mod = key[:-7]
                        w = ops.decode(st.get_tensor(key), st.get_tensor(mod + ".meta"))
                        dense.get_submodule(mod).weight.copy_(w)


def check(sparse, dense, prompt, seed):
    """Teacher-forced logits (relative error) and greedy tokens (equal
    prefix) of the sparse model against the dense pruned one."""
    vocab = sparse.config.vocab_size
    ids = torch.randint(3, vocab, (1, prompt), device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    with torch.no_grad():
        a = sparse(ids).logits.float()
        b = dense(ids).logits.float()
    rel = ((a - b).norm() / b.norm()).item()
    g1 = sparse.generate(ids[:, :64], max_new_tokens=32, min_new_tokens=32, do_sample=False, disable_compile=True)[0, 64:]
    g2 = dense.generate(ids[:, :64], max_new_tokens=32, min_new_tokens=32, do_sample=False, disable_compile=True)[0, 64:]
    same = int((g1 == g2).long().cumprod(0).sum().item())
    return rel, same


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sparse", required=True, help="the ampere checkpoint")
    ap.add_argument("--dense", required=True, help="the dense checkpoint it was pruned from")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    env = dict(gpu=torch.cuda.get_device_name(), driver=torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else "",
               torch=torch.__version__, transformers=__import__("transformers").__version__,
               cuda=torch.version.cuda, sfsurgery_python=sfsurgery.__version__)
    out = dict(label=a.label, sparse=a.sparse, dense=a.dense, prompt=a.prompt, new=a.new, env=env)

    print(f"sparse: {a.sparse}", flush=True)
    t0 = time.perf_counter()
    sparse = AutoModelForCausalLM.from_pretrained(a.sparse, device_map="cuda")
    out["sparse_load_s"] = time.perf_counter() - t0
    out["sparse_weight_bytes"] = weight_bytes(sparse)
    out["sparse_projection_bytes"] = projection_bytes(sparse)
    out["sparse_rows"] = measure(sparse, batches, a.prompt, a.new, a.seed)
    sparse.cpu()  # off the GPU while the dense model is timed
    gc.collect()
    torch.cuda.empty_cache()
    torch._dynamo.reset()

    print(f"dense: {a.dense}", flush=True)
    dense = AutoModelForCausalLM.from_pretrained(a.dense, device_map="cuda", dtype=torch.bfloat16)
    out["dense_weight_bytes"] = weight_bytes(dense)
    out["dense_projection_bytes"] = projection_bytes(dense)
    out["dense_rows"] = measure(dense, batches, a.prompt, a.new, a.seed)
    torch._dynamo.reset()

    set_pruned(dense, a.sparse)
    sparse.cuda()
    rel, same = check(sparse, dense, a.prompt, a.seed)
    out["logits_rel_error"], out["greedy_same_tokens"] = rel, same
    print(f"teacher-forced logits rel. error {rel:.2e}; greedy: first {same} of 32 tokens the same", flush=True)

    rows = []
    for b in batches:
        s, d = out["sparse_rows"][b], out["dense_rows"][b]
        share = d["projections_s"] / d["step_s"]
        speed = d["projections_s"] / s["projections_s"]
        bound = 1 / ((1 - share) + share / speed)
        ratio = s["decode_tok_s"] / d["decode_tok_s"]
        rows.append(dict(batch=b, share=share, projection_speedup=speed, amdahl=bound, decode_speedup=ratio,
                         of_bound=ratio / bound, ttft_ratio=d["ttft_s"] / s["ttft_s"]))
        print(f"batch {b}: decode {ratio:.3f}x dense (Amdahl bound {bound:.3f}x: share {share:.2f}, projections {speed:.2f}x; "
              f"{ratio / bound:.1%} of the bound); ttft {d['ttft_s'] / s['ttft_s']:.2f}x", flush=True)
    out["summary"] = rows
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
