"""The GPT both PyTorch twins train (gpt_twin.py on the GPU, train_twin.py's gpt-cpu section):
halfgrad's nn::GPT written as a PyTorch user would (nanoGPT's shape), with the same init.

  token and position embeddings; pre-LayerNorm blocks (attention: one Linear(C, 3C) for q, k,
  v, causal scaled dot-product attention, an output Linear(C, C); MLP: Linear(C, 4C),
  GELU(tanh), Linear(4C, C)); a final LayerNorm; an lm_head without bias, untied from wte.
  Init: N(0, 0.02) for Linear and Embedding weights, zero biases, the q/k/v projection
  xavier_uniform (nn::MultiheadAttention's in_proj_weight keeps its own init).

Attention is F.scaled_dot_product_attention(is_causal=True) where the PyTorch has it (2.0 and
later); PyTorch 1.13 (Debian 12's, the CPU peer) has none, and there it is written out as a
1.13 user would: q @ k^T * D^-1/2, masked_fill of the future with -inf, softmax, @ v.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GptConfig:
    vocab: int
    block: int
    layers: int
    heads: int
    embd: int
    batch: int

    def shape(self):
        return (f"gpt-L{self.layers}-H{self.heads}-C{self.embd}-T{self.block}-V{self.vocab}")


def causal_attention(q, k, v):  # [B, H, T, D] each
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.n_head = H
        self.ln_1 = nn.LayerNorm(C)
        self.in_proj = nn.Linear(C, 3 * C)
        self.out_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * C, C))

    def attn(self, x):
        B, T, C = x.shape
        H = self.n_head
        q, k, v = self.in_proj(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        y = causal_attention(q, k, v)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.embd
        self.wte = nn.Embedding(config.vocab, C)
        self.wpe = nn.Embedding(config.block, C)
        self.h = nn.ModuleList(Block(C, config.heads) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, config.vocab, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, 0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, 0.02)
        for block in self.h:
            nn.init.xavier_uniform_(block.in_proj.weight)
        self.register_buffer("positions", torch.arange(config.block), persistent=False)

    def forward(self, idx):  # [B, T] -> [B, T, V]
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(self.positions[:T])
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def param_groups(model):
    """nanoGPT's groups: weight decay 0.1 on parameters of 2 or more dims, 0 on the rest."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
