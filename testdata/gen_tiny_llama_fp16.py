"""Writes a small fp16 LLaMA checkpoint with transformers (random init, seed 0)."""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(
    vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
    bos_token_id=1, eos_token_id=2,
)
model = LlamaForCausalLM(cfg).to(torch.float16)
model.save_pretrained(sys.argv[1], safe_serialization=True)
