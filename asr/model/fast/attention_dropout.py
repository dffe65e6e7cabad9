"""Attention with dropout on CPU (reference: ``F.scaled_dot_product_attention(..., dropout_p=p)``).

In training with dropout, SDPA on CPU takes its math path and draws PyTorch's dropout mask; this is
the same math with the cheaper mask of :mod:`asr.model.fast.cheap_dropout`. Elsewhere (no dropout,
inference, GPUs, or the speed path ``cheap_dropout`` off) it is SDPA itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from asr import speed
from asr.model.fast.cheap_dropout import dropout

__all__ = ["attention"]


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep_mask: torch.Tensor | None, p: float
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_k), masked) with dropout ``p``, times v: (B, H, L, d_k)."""
    if p == 0.0 or q.device.type != "cpu" or not speed.enabled("cheap_dropout"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep_mask, dropout_p=p)
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, H, L, S)
    if keep_mask is not None:  # an additive 0 / -inf bias: a vectorised add, and nothing in backward
        scores = scores + torch.zeros(keep_mask.shape, dtype=scores.dtype).masked_fill_(~keep_mask, float("-inf"))
    return dropout(scores.softmax(-1), p, True) @ v
