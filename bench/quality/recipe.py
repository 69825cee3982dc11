"""The test model's recipe (train.py): sizes, optimizer settings and the
learning-rate schedule, and how many steps fit the time budget. Standard
library only: python/tests/test_quality_corpus.py checks it in CI.

FULL follows the pilot that trained well on an H200: 88M parameters,
byte-level BPE of 8,192, 300 MB of Python sources, batches of 64 × 1024
tokens for 180 s, under one epoch. QUICK is the same architecture family
at a size that trains in about 20 s, for the GPU tests. Every projection
shape is one the 2:4 kernels run (rows a multiple of 32, columns of 64).
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    """One variant of the test model and its training."""

    name: str
    corpus_bytes: int  # the first this many bytes of sources, in sorted path order
    tokenizer_files: int  # training files the BPE is trained on
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    max_positions: int
    seqlen: int  # tokens per training sequence
    batch: int  # sequences per step
    peak_lr: float
    warmup: int  # steps of linear warm-up
    final_lr_fraction: float  # the cosine decays to this fraction of peak_lr
    weight_decay: float
    betas: tuple
    clip: float
    budget_s: float  # seconds of training steps
    probe_steps: int  # steps after which the step time is measured and the step count fixed
    text_bytes: int  # size of heldout.txt, train.txt and trainsplit.txt
    file_bytes: int  # of each file, at most this head (whole lines) in those texts

    def projections(self):
        """(name, rows, columns) of one layer's projection weights."""
        head_dim = self.hidden // self.heads
        return [("q_proj", self.hidden, self.hidden), ("k_proj", self.kv_heads * head_dim, self.hidden),
                ("v_proj", self.kv_heads * head_dim, self.hidden), ("o_proj", self.hidden, self.hidden),
                ("gate_proj", self.intermediate, self.hidden), ("up_proj", self.intermediate, self.hidden),
                ("down_proj", self.hidden, self.intermediate)]

    def parameters(self) -> int:
        """Parameters of the model: untied embeddings and LM head, the
        projections, and the RMSNorm weights."""
        per_layer = sum(n * k for _, n, k in self.projections()) + 2 * self.hidden
        return 2 * self.vocab * self.hidden + self.layers * per_layer + self.hidden


FULL = Recipe(name="full", corpus_bytes=300 * 10**6, tokenizer_files=4000, vocab=8192, hidden=768, intermediate=2048,
              layers=12, heads=12, kv_heads=4, max_positions=1024, seqlen=1024, batch=64, peak_lr=2e-3, warmup=100,
              final_lr_fraction=0.1, weight_decay=0.1, betas=(0.9, 0.95), clip=1.0, budget_s=180.0, probe_steps=30,
              text_bytes=4 << 20, file_bytes=8 << 10)

QUICK = Recipe(name="quick", corpus_bytes=24 * 10**6, tokenizer_files=400, vocab=4096, hidden=256, intermediate=768,
               layers=4, heads=4, kv_heads=2, max_positions=512, seqlen=512, batch=32, peak_lr=3e-3, warmup=20,
               final_lr_fraction=0.1, weight_decay=0.1, betas=(0.9, 0.95), clip=1.0, budget_s=20.0, probe_steps=15,
               text_bytes=512 << 10, file_bytes=2 << 10)

RECIPES = {r.name: r for r in (FULL, QUICK)}


def lr_at(step: int, total: int, r: Recipe) -> float:
    """The learning rate of step (0-based) of total: linear warm-up to
    peak_lr over warmup steps, then a cosine from peak_lr down to
    final_lr_fraction of it at the last step."""
    if step < r.warmup:
        return r.peak_lr * (step + 1) / r.warmup
    span = max(1, total - 1 - r.warmup)
    p = min(1.0, (step - r.warmup) / span)
    floor = r.final_lr_fraction
    return r.peak_lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def planned_steps(done: int, step_s: float, elapsed_s: float, budget_s: float, epoch_steps: int) -> int:
    """The training's step count: the done steps plus as many more of
    step_s seconds as fit in what is left of budget_s after elapsed_s,
    but never more than one epoch (epoch_steps)."""
    more = math.floor(max(0.0, budget_s - elapsed_s) / step_s + 1e-9) if step_s > 0 else epoch_steps
    return max(done, min(epoch_steps, done + more))
