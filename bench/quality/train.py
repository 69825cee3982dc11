#!/usr/bin/env python3
"""train.py: trains the test model, a LLaMA-architecture causal LM of
transformers' LlamaForCausalLM, on the Python sources of the installation
that runs it, and writes it as an ordinary Hugging Face checkpoint.

    python3 bench/quality/train.py -o DIR [--quick] [--seed N] [--steps N] [--force]

Writes DIR (built beside it under a temporary name and renamed when
complete):
    DIR/model/       config.json, generation_config.json, model.safetensors
                     (bf16), tokenizer.json and tokenizer_config.json:
                     loads with from_pretrained and AutoTokenizer, prunes
                     with `sfsurgery prune` and serves like a downloaded model
    DIR/heldout.txt  held-out files (never trained on) in a seeded random
                     order, joined by the end-of-text token
    DIR/train.txt    training files of which the model trained on every
                     token, in training order: train-window perplexity and
                     calibration text
    DIR/trainsplit.txt  training-split files in a seeded random order, as
                     heldout.txt draws the held-out ones, whether or not
                     the model reached them
    Each text holds the head of each file it takes (its first lines, up to
    the recipe's file_bytes): a few large generated files would otherwise
    make up most of a text.
    DIR/train.json   the recipe, seed, corpus sizes, steps, tokens trained,
                     loss curve and final loss, seconds, versions

The recipe (recipe.py): corpus as corpus.py splits it (5% of files held
out by a hash of their names; from the standard library and purelib, and
from every site-packages directory where those hold less than half the
recipe's bytes); a byte-level BPE trained with `tokenizers`
on a seeded sample of training files; all training files encoded in
parallel (the tokenizer's batch encoding, on every core) into one stream,
files separated by the end-of-text token, cut into sequences that a seeded
permutation orders; AdamW with bf16 autocast, warm-up then cosine. The
training runs for --steps, or by default as many steps as fit the
recipe's time budget at the step time measured over its first steps, and
never past one epoch. FULL takes about 5 minutes on one H200, QUICK
(--quick) about a minute.
"""

import argparse
import json
import os
import platform
import shutil
import sys
import time
from array import array
from dataclasses import asdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
from recipe import RECIPES, lr_at, planned_steps  # noqa: E402

LOG_EVERY = 50


def log(t0, msg):
    print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"train.py: {msg}", file=sys.stderr)
    sys.exit(2)


def train_tokenizer(texts, vocab):
    """A byte-level BPE of vocab tokens, EOS first (id 0), trained on texts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=[corpus.EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    if tok.token_to_id(corpus.EOS) != 0 or tok.get_vocab_size() > vocab:
        fail(f"tokenizer: {corpus.EOS} has id {tok.token_to_id(corpus.EOS)}, vocabulary {tok.get_vocab_size()}")
    return tok


def encode(tok, texts, chunk=2048):
    """The stream of the texts' token ids, each text followed by EOS, as
    an int32 array, and each text's (start, end) in it."""
    ids, spans = array("i"), []
    enc = getattr(tok, "encode_batch_fast", tok.encode_batch)
    for i in range(0, len(texts), chunk):
        for e in enc(texts[i : i + chunk]):
            start = len(ids)
            ids.extend(e.ids)
            spans.append((start, len(ids)))
            ids.append(0)
    return ids, spans


def save_tokenizer(tok, path, r, samples):
    """Saves tok as a transformers tokenizer (PreTrainedTokenizerFast, EOS as
    bos and eos, no token added to a sequence) and checks that
    AutoTokenizer loads it and encodes samples as tok does."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=corpus.EOS, eos_token=corpus.EOS,
                                   model_max_length=r.max_positions)
    fast.save_pretrained(path)
    back = AutoTokenizer.from_pretrained(path)
    if back.eos_token_id != 0 or back.bos_token_id != 0:
        fail(f"{path}: the saved tokenizer has bos {back.bos_token_id}, eos {back.eos_token_id}, want 0")
    for s in samples:
        want = tok.encode(s).ids
        got = list(back(s)["input_ids"])
        if got != want:
            fail(f"{path}: AutoTokenizer ({type(back).__name__}) encodes a sample otherwise than the trained tokenizer "
                 f"({got[:8]}… against {want[:8]}…)")


def model_config(r):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=r.vocab, hidden_size=r.hidden, intermediate_size=r.intermediate,
                       num_hidden_layers=r.layers, num_attention_heads=r.heads, num_key_value_heads=r.kv_heads,
                       max_position_embeddings=r.max_positions, tie_word_embeddings=False, bos_token_id=0,
                       eos_token_id=0, rms_norm_eps=1e-5, hidden_act="silu", use_cache=True)


def train(r, stream, seed, steps, t0):
    """Trains the model on stream (int32 token ids) and returns it (float32
    on the GPU), the trained sequences' indices and the training log."""
    import torch
    from transformers import LlamaForCausalLM

    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    tokens = torch.frombuffer(stream, dtype=torch.int32).to(dev)
    nseq = len(stream) // r.seqlen
    seqs = tokens[: nseq * r.seqlen].view(nseq, r.seqlen)
    order = torch.randperm(nseq, generator=torch.Generator().manual_seed(seed)).to(dev)
    epoch_steps = nseq // r.batch
    if steps and steps > epoch_steps:
        fail(f"--steps {steps}: one epoch of this corpus is {epoch_steps} steps of {r.batch} × {r.seqlen} tokens")
    if epoch_steps <= r.probe_steps:
        fail(f"the corpus holds {epoch_steps} steps of {r.batch} × {r.seqlen} tokens, too few for this recipe")

    torch.manual_seed(seed)
    with dev:  # initialized on the GPU, seeded
        model = LlamaForCausalLM(model_config(r))
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": r.weight_decay}, {"params": plain, "weight_decay": 0.0}],
                            lr=r.peak_lr, betas=r.betas, fused=True)
    params = list(model.parameters())

    def step(i, total):
        lr = lr_at(i, total, r)
        for g in opt.param_groups:
            g["lr"] = lr
        x = seqs[order[i * r.batch : (i + 1) * r.batch]].long()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, r.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    losses, curve = [], []
    total = steps or epoch_steps  # the probe steps are all warm-up: they do not depend on total
    torch.cuda.synchronize()
    start = time.perf_counter()
    timed_from = r.probe_steps // 3
    i = 0
    while i < total:
        if not steps and i == timed_from:
            torch.cuda.synchronize()
            t_probe = time.perf_counter()
        if not steps and i == r.probe_steps:
            torch.cuda.synchronize()
            now = time.perf_counter()
            step_s = (now - t_probe) / (r.probe_steps - timed_from)
            total = planned_steps(i, step_s, now - start, r.budget_s, epoch_steps)
            log(t0, f"{step_s * 1e3:.1f} ms a step: {total} steps ({total / epoch_steps:.2f} of an epoch)")
        losses.append(step(i, total))
        i += 1
        if i % LOG_EVERY == 0 or i == total:
            mean = torch.stack(losses[-LOG_EVERY:]).mean().item()
            curve.append([i, mean])
            log(t0, f"step {i}/{total}: loss {mean:.4f}, lr {lr_at(i - 1, total, r):.2e}")
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    final = torch.stack(losses[-20:]).mean().item()
    info = dict(steps=total, epoch_steps=epoch_steps, sequences=nseq, tokens_trained=total * r.batch * r.seqlen,
                epochs=total / epoch_steps, train_seconds=seconds, final_loss=final, loss_curve=curve)
    return model, order[: total * r.batch].cpu(), info


def covered(start, end, trained, seqlen):
    """Reports whether every token of the stream from start to end, and the
    one at end (the EOS after a text is predicted too), lies in a trained
    sequence (trained: a bool per sequence)."""
    last = end // seqlen
    return last < len(trained) and all(trained[start // seqlen : last + 1])


def trained_heads(tok, texts, spans, trained, seqlen, cap):
    """The heads (corpus.head, cap bytes) of the stream's texts, in stream
    order, every token of which the model trained on; spans are the texts'
    (start, end) in the stream."""
    for text, (a, b) in zip(texts, spans):
        h = corpus.head(text, cap)
        end = b if len(h) == len(text) else a + len(tok.encode(h).ids)
        if covered(a, end, trained, seqlen):
            yield h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="the output directory")
    ap.add_argument("--quick", action="store_true", help="the small variant for tests (about a minute)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=0, help="train this many steps (default: as many as fit the time budget)")
    ap.add_argument("--force", action="store_true", help="replace an existing output directory")
    a = ap.parse_args()
    t0 = time.perf_counter()
    r = RECIPES["quick" if a.quick else "full"]
    out = os.path.abspath(a.output)
    if os.path.exists(out) and not a.force:
        fail(f"{out}: exists (--force replaces it)")
    if a.steps < 0:
        fail(f"--steps {a.steps}: want 0 (the time budget) or more")
    try:
        import tokenizers
        import torch
        import transformers
    except ImportError as e:
        fail(f"needs torch, transformers and tokenizers: {e}")
    if not torch.cuda.is_available():
        fail("needs a CUDA GPU")
    seconds = {}

    roots = corpus.roots()
    files = corpus.sources(roots, r.corpus_bytes)
    if sum(s.size for s in files) < r.corpus_bytes // 2:  # a distribution that keeps its packages apart
        roots = corpus.roots(every_site=True)
        files = corpus.sources(roots, r.corpus_bytes)
    texts = corpus.read_all(files)
    train_src, held_src = corpus.split(s for s, _ in texts)
    by_name = {s.name: t for s, t in texts}
    corpus_bytes = sum(s.size for s, _ in texts)
    seconds["corpus"] = time.perf_counter() - t0
    log(t0, f"corpus: {len(texts)} files, {corpus_bytes / 1e6:.1f} MB from {', '.join(d for _, d in roots)}; "
            f"{len(held_src)} held out")
    if corpus_bytes < r.corpus_bytes // 3:
        print(f"train.py: warning: only {corpus_bytes / 1e6:.1f} MB of sources, the recipe expects "
              f"{r.corpus_bytes / 1e6:.0f} MB", file=sys.stderr)

    t = time.perf_counter()
    sample = [by_name[s.name] for s in corpus.shuffled(train_src, a.seed)[: r.tokenizer_files]]
    tok = train_tokenizer(sample, r.vocab)
    seconds["tokenizer"] = time.perf_counter() - t
    log(t0, f"tokenizer: byte-level BPE of {tok.get_vocab_size()} on {len(sample)} files")

    t = time.perf_counter()
    stream_src = corpus.shuffled(train_src, a.seed + 1)
    stream, spans = encode(tok, [by_name[s.name] for s in stream_src])
    seconds["encode"] = time.perf_counter() - t
    log(t0, f"encoded: {len(stream) / 1e6:.1f}M training tokens ({corpus_bytes / max(1, len(stream)):.2f} bytes a token)")

    t = time.perf_counter()
    model, trained_seqs, info = train(r, stream, a.seed, a.steps, t0)
    seconds["train"] = time.perf_counter() - t

    t = time.perf_counter()
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(out)}.train-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    mdir = os.path.join(tmp, "model")
    try:
        model.to(torch.bfloat16)
        model.generation_config.pad_token_id = 0
        model.save_pretrained(mdir)
        samples = [by_name[s.name][:2000] for s in held_src[:4]] + ["x = 1" + corpus.EOS + "y = 2\n"]
        save_tokenizer(tok, mdir, r, samples)
        trained = [False] * info["sequences"]
        for s in trained_seqs.tolist():
            trained[s] = True
        seen = trained_heads(tok, (by_name[s.name] for s in stream_src), spans, trained, r.seqlen, r.file_bytes)
        train_text = corpus.joined(seen, r.text_bytes)
        held_text = corpus.joined((by_name[s.name] for s in corpus.shuffled(held_src, a.seed + 2)), r.text_bytes, r.file_bytes)
        split_text = corpus.joined((by_name[s.name] for s in corpus.shuffled(train_src, a.seed + 3)), r.text_bytes,
                                   r.file_bytes)
        for name, body in (("train.txt", train_text), ("heldout.txt", held_text), ("trainsplit.txt", split_text)):
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(body)
        seconds["save"] = time.perf_counter() - t
        seconds["total"] = time.perf_counter() - t0
        doc = dict(
            recipe=asdict(r), seed=a.seed, parameters=sum(p.numel() for p in model.parameters()),
            corpus=dict(roots=[d for _, d in roots], files=len(texts), bytes=corpus_bytes, train_files=len(train_src),
                        heldout_files=len(held_src), train_tokens=len(stream),
                        heldout_txt_bytes=len(held_text.encode()), train_txt_bytes=len(train_text.encode()),
                        trainsplit_txt_bytes=len(split_text.encode()),
                        train_txt_files=train_text.count(corpus.EOS) + 1),
            tokenizer=dict(vocab=tok.get_vocab_size(), files=len(sample), eos=corpus.EOS),
            seconds=seconds, gpu=torch.cuda.get_device_name(),
            versions=dict(python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__,
                          tokenizers=tokenizers.__version__),
            command=" ".join(["python3", "bench/quality/train.py"] + sys.argv[1:]),
            **info,
        )
        with open(os.path.join(tmp, "train.json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        if os.path.exists(out):
            old = tmp + ".old"
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(t0, f"wrote {out}: {doc['parameters'] / 1e6:.1f}M parameters, {info['steps']} steps, "
            f"{info['tokens_trained'] / 1e6:.1f}M tokens ({info['epochs']:.2f} of an epoch), final loss {info['final_loss']:.4f}")


if __name__ == "__main__":
    main()
