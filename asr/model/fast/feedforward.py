"""The Transformer's position-wise feed-forward block (reference: Linear, ReLU, Dropout, Linear).

With GELU (Whisper's MLP) it is the reference itself; the paths below are the ReLU block's.

A drop-in for ``nn.Sequential(nn.Linear, nn.ReLU, nn.Dropout, nn.Linear)`` with the same state-dict
keys (``0.*``, ``3.*``). What it does differently, each equal to the reference:

- outside autograd, the first product and the ReLU in one step (:func:`linear_relu`);
- in training, the ReLU and dropout keep one tensor for backward instead of two (:func:`relu_dropout`);
- given the attention's keep mask in training on a CPU, it runs on the real frames only and leaves
  the padding's rows 0 (speed path ``real_frames``: :mod:`asr.model.fast.real_frames`);
- where a quantised stand-in replaced the first Linear (``asr.lm.quantize``), that module runs as is.
"""

from __future__ import annotations

import torch
from torch import nn

from asr.model.fast.cheap_dropout import Dropout
from asr.model.fast.fused_relu_dropout import relu_dropout
from asr.model.fast.onednn_linear import Linear, linear_relu
from asr.model.fast.real_frames import on_real_frames, real_rows

__all__ = ["FeedForward"]


class FeedForward(nn.Sequential):
    """Position-wise FFN: Linear, ReLU (or GELU: Whisper's), dropout, Linear, on (..., d_model)."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float, activation: str = "relu"):
        act = nn.GELU() if activation == "gelu" else nn.ReLU()
        super().__init__(Linear(d_model, ffn_dim), act, Dropout(dropout), Linear(ffn_dim, d_model))

    def forward(self, x: torch.Tensor, keep_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``keep_mask``: for x (B, T, D), B*T elements True on real frames (the encoder's attention
        mask), or None: every row is real. The padding's output rows are then 0 or computed."""
        real = None if keep_mask is None else real_rows(keep_mask, x)
        return on_real_frames(self._rows, x, real)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        w1, act, drop, w2 = self
        if isinstance(act, nn.GELU):
            return w2(drop(act(w1(x))))
        plain = isinstance(w1, nn.Linear)  # not a quantised stand-in (asr.lm.quantize)
        if plain and not torch.is_grad_enabled() and not (self.training and drop.p > 0):  # inference: one step
            return w2(linear_relu(x, w1.weight, w1.bias))
        return w2(relu_dropout(w1(x), drop.p, self.training))  # = w2(drop(relu(w1(x))))
