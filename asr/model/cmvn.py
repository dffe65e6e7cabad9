"""Global cepstral mean and variance normalisation, kept inside the model.

Statistics are accumulated in float64 over any number of (T, F) feature tensors, saved as JSON
beside the model and loaded into the model's buffers, so a saved model carries its own
normalisation (as WeNet does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from ..atomic import atomic_write_text

__all__ = ["CMVNStats", "GlobalCMVN"]


class CMVNStats:
    """Running per-dimension sums (float64) of features; ``mean`` and ``istd`` come from them."""

    def __init__(self, dim: int):
        self.sum = torch.zeros(dim, dtype=torch.float64)
        self.sum_sq = torch.zeros(dim, dtype=torch.float64)
        self.count = 0

    def add(self, feats: torch.Tensor) -> None:
        """Accumulate a (T, F) tensor of features."""
        x = feats.detach().to(torch.float64).reshape(-1, self.sum.numel())
        self.sum += x.sum(0)
        self.sum_sq += (x * x).sum(0)
        self.count += x.shape[0]

    @classmethod
    def from_features(cls, feats: Iterable[torch.Tensor]) -> CMVNStats:
        stats: CMVNStats | None = None
        for f in feats:
            if stats is None:
                stats = cls(f.shape[-1])
            stats.add(f)
        if stats is None or stats.count == 0:
            raise ValueError("CMVN statistics need at least one frame of features")
        return stats

    def merge(self, other: CMVNStats) -> CMVNStats:
        self.sum += other.sum
        self.sum_sq += other.sum_sq
        self.count += other.count
        return self

    def mean_istd(self, floor: float = 1e-20) -> tuple[torch.Tensor, torch.Tensor]:
        if self.count == 0:
            raise ValueError("CMVN statistics are empty")
        mean = self.sum / self.count
        var = (self.sum_sq / self.count - mean * mean).clamp_min(floor)
        return mean.float(), var.rsqrt().float()

    def save(self, path: str | os.PathLike) -> None:
        mean, istd = self.mean_istd()
        data = {
            "count": self.count,
            "sum": self.sum.tolist(),
            "sum_sq": self.sum_sq.tolist(),
            "mean": mean.tolist(),
            "istd": istd.tolist(),
        }
        atomic_write_text(path, json.dumps(data))

    @classmethod
    def load(cls, path: str | os.PathLike) -> CMVNStats:
        try:
            data = json.loads(Path(path).read_text())
            stats = cls(len(data["sum"]))
            stats.sum = torch.tensor(data["sum"], dtype=torch.float64)
            stats.sum_sq = torch.tensor(data["sum_sq"], dtype=torch.float64)
            stats.count = int(data["count"])
        except FileNotFoundError as e:
            raise ValueError(f"{path}: no such CMVN statistics file") from e
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a CMVN statistics file ({e})") from e
        return stats


class GlobalCMVN(nn.Module):
    """(x - mean) * istd per feature dimension; identity until statistics are loaded."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("istd", torch.ones(dim))

    def load_stats(self, stats: CMVNStats) -> None:
        mean, istd = stats.mean_istd()
        if mean.numel() != self.mean.numel():
            raise ValueError(f"CMVN statistics have {mean.numel()} dimensions, the model expects {self.mean.numel()}")
        self.mean.copy_(mean)
        self.istd.copy_(istd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, F)
        return (x - self.mean) * self.istd
