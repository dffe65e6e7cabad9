"""dropout(relu(h)) keeping one tensor for backward (reference: ``nn.ReLU`` then ``nn.Dropout``).

The FFN's ReLU and dropout each keep an (N, ffn_dim) tensor for backward; fused, only the output
is kept: the gradient passes exactly where the output is positive (ReLU open and dropout kept),
times the dropout scale. Bit-identical to the two modules with the same random numbers
(``tests/test_perf_equivalence.py::test_fused_feedforward_is_bitwise_identical``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .cheap_dropout import dropout, dropout_scale

__all__ = ["relu_dropout"]


def relu_dropout(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(relu(h), p, training)``; one saved tensor when autograd records it."""
    if not torch.is_grad_enabled():
        return dropout(h.relu_(), p, training)
    return _ReluDropout.apply(h, p, training)


class _ReluDropout(torch.autograd.Function):
    """dropout(relu(h)) that keeps only its output for backward: the gradient passes exactly where
    the output is positive (ReLU open and dropout kept), times the dropout scale. The same values
    and random numbers as nn.ReLU + asr's Dropout, without keeping their two (N, ffn_dim) tensors."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        y = dropout(F.relu(h), p, training)
        ctx.save_for_backward(y)
        ctx.scale = dropout_scale(p, h.device) if training and p > 0 else None
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (y,) = ctx.saved_tensors
        if ctx.scale is not None:
            grad = grad * ctx.scale  # the forward's own scale
        return torch.ops.aten.threshold_backward(grad, y, 0), None, None  # grad where y > 0, else 0
