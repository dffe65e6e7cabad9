"""Global cepstral mean and variance normalisation, kept inside the model.

The statistics (``asr.data.cmvn``) are loaded into the model's buffers, so a saved model carries
its own normalisation (as WeNet does).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["GlobalCMVN"]


class GlobalCMVN(nn.Module):
    """(x - mean) * istd per feature dimension; identity until statistics are loaded."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("istd", torch.ones(dim))

    def load_stats(self, mean: torch.Tensor, istd: torch.Tensor) -> None:
        """Mean and inverse standard deviation per dimension (``CMVNStats.mean_istd()``)."""
        if mean.numel() != self.mean.numel():
            raise ValueError(f"CMVN statistics have {mean.numel()} dimensions, the model expects {self.mean.numel()}")
        self.mean.copy_(mean)
        self.istd.copy_(istd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, F)
        return (x - self.mean) * self.istd
