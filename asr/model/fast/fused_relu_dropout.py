"""dropout(relu(h)) keeping one tensor for backward (reference: ``nn.ReLU`` then ``nn.Dropout``).

The FFN's ReLU and dropout each keep an (N, ffn_dim) tensor for backward; fused, only the output
is kept: the gradient passes exactly where the output is positive (ReLU open and dropout kept),
times the dropout scale. Bit-identical to the two modules with the same random numbers
(``tests/test_perf_equivalence.py::test_fused_feedforward_is_bitwise_identical``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from asr.model.fast.cheap_dropout import _cheap, dropout, dropout_scale, dropped

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
        if training and p > 0 and _cheap(h.device):  # the mask and scale in one pass over h, then the ReLU
            y = dropped(h, p).relu_()  # = relu(h) * mask * scale: the scale is positive
        else:
            y = dropout(F.relu(h), p, training)
        ctx.save_for_backward(y)
        ctx.scale = dropout_scale(p, h.device) if training and p > 0 else None
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (y,) = ctx.saved_tensors
        grad = torch.ops.aten.threshold_backward(grad, y, 0)  # grad where y > 0, else 0
        if ctx.scale is not None:
            grad.mul_(ctx.scale)  # the forward's own scale
        return grad, None, None
