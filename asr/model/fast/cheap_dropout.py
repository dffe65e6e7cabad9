"""Dropout whose random mask is cheap on CPU.

PyTorch's CPU dropout draws one number per element from its Mersenne Twister in a serial loop
(where MKL's tuned kernels run, MKL's vectorised generator instead): a large share of a training
step. :func:`keep_mask` draws 64 random bits per four elements from the same generator (so
seeding, checkpointed RNG state and exact resume work as before) and compares each 16-bit
quarter with a threshold: four times fewer draws. The
drop probability is rounded to a multiple of 1/65536 (0.1 becomes 0.100006) and kept values
are scaled by 1 / (1 - that probability).

The comparison writes the mask as 1s and 0s in the input's dtype, and one ``addcmul`` makes
x * mask * scale in one pass over x, forward and backward (backward keeps that mask).
``where(mask, x, 0)`` runs element by element on CPU, and a product with a uint8 mask first
copies the mask to the input's dtype. Other devices, and CPUs where the speed path
``cheap_dropout`` is off (``asr.speed``), use ``F.dropout``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from asr import speed

__all__ = ["Dropout", "dropout", "dropped", "keep_mask", "effective_p", "dropout_scale"]

_LEVELS = 1 << 16


def effective_p(p: float) -> float:
    """The drop probability :func:`keep_mask` realises for ``p``: a multiple of 1/65536."""
    return round(p * _LEVELS) / _LEVELS


def _cheap(device: torch.device) -> bool:
    return device.type == "cpu" and speed.enabled("cheap_dropout")


def dropout_scale(p: float, device: torch.device) -> float:
    """What :func:`dropout` multiplies kept values by on ``device``: 1 / (1 - the realised p)."""
    return 1.0 / (1.0 - (effective_p(p) if _cheap(device) else p))


def _quarters(n: int) -> torch.Tensor:
    """n int16 values, uniform over all 65536: the 16-bit quarters of (n + 3) // 4 random words."""
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # the full range: no modulo
    words.bitwise_xor_(-(2**63))  # = torch.randint(-2**63, 2**63 - 1): the masks of earlier releases, 10% cheaper
    return words.view(torch.int16)[:n]


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """A CPU tensor of ``shape``, each element 1 (kept; True) with probability 1 - effective_p(p), else 0."""
    out = torch.empty(shape, dtype=dtype)
    return torch.ge(_quarters(math.prod(shape)).view(shape), -(2**15) + round(p * _LEVELS), out=out)


def _times(x: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """x * mask * scale in one pass over x (mask in x's dtype)."""
    return torch.addcmul(x.new_zeros(()), x, mask, value=scale)


def dropped(x: torch.Tensor, p: float) -> torch.Tensor:
    """x with the cheap mask and scale of :func:`dropout` applied, outside autograd (CPU, p > 0)."""
    return _times(x, keep_mask(x.shape, p, x.dtype), dropout_scale(p, x.device))


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)``; on CPU with the cheaper mask of :func:`keep_mask`.

    A dropped element is ``x * 0``: -0.0 where x is negative (equal to 0.0 in every sum that follows)."""
    if not training or p == 0.0:
        return x
    if not _cheap(x.device):
        return F.dropout(x, p, True)
    return _MaskedScale.apply(x, p)


class _MaskedScale(torch.autograd.Function):
    """x * mask * scale; backward keeps the mask (in x's dtype) and multiplies the gradient by it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        mask = keep_mask(x.shape, p, x.dtype)
        ctx.scale = dropout_scale(p, x.device)
        ctx.save_for_backward(mask)
        return _times(x, mask, ctx.scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (mask,) = ctx.saved_tensors
        return _times(grad, mask.to(grad.dtype), ctx.scale), None


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout` (same attribute ``p``, no state)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
