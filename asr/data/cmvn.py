"""Global CMVN statistics: per-dimension float64 sums of fbank features, saved as JSON.

``asr cmvn`` and training compute them over a manifest (:func:`compute_cmvn_stats`, in DataLoader
processes); the model loads ``mean_istd()`` into its :class:`asr.model.GlobalCMVN`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from asr.atomic import atomic_write_text
from asr.config import DataConfig
from asr.data.dataset import DataError
from asr.features import compute_features
from asr.features.audio import AudioError, load_audio

__all__ = ["CMVNStats", "compute_cmvn_stats"]

log = logging.getLogger(__name__)


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


class _CMVNChunks(Dataset):
    """Chunk ``i`` of the records -> (sum (F,), sum of squares (F,), frames, unreadable ids), float64."""

    def __init__(self, records: Sequence[dict[str, Any]], data_cfg: DataConfig, chunk: int):
        self.records, self.cfg, self.chunk = records, data_cfg, chunk

    def __len__(self) -> int:
        return (len(self.records) + self.chunk - 1) // self.chunk

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int, list[str]]:
        f = self.cfg.num_mel_bins
        s = torch.zeros(f, dtype=torch.float64)
        s2 = torch.zeros(f, dtype=torch.float64)
        n, bad = 0, []
        for rec in self.records[i * self.chunk : (i + 1) * self.chunk]:
            try:
                wav = load_audio(rec["audio"], self.cfg.sample_rate, rec.get("offset", 0.0), rec.get("end"))
                x = compute_features([wav], self.cfg)[0].to(torch.float64)  # (T, F)
            except AudioError as e:
                log.warning("CMVN: skipping %s: %s", rec["id"], e)
                bad.append(rec["id"])
                continue
            s += x.sum(0)
            s2 += (x * x).sum(0)
            n += x.shape[0]
        return s, s2, n, bad


def compute_cmvn_stats(
    records: Sequence[dict[str, Any]],
    data_cfg: DataConfig,
    num_workers: int = 0,
    chunk: int = 32,
    progress: bool = True,
):
    """Global CMVN statistics of the fbank features of ``records`` (no dither, no speed perturbation),
    computed in ``num_workers`` DataLoader processes. Returns ``(CMVNStats, unreadable ids)``."""
    stats = CMVNStats(data_cfg.num_mel_bins)
    unreadable: list[str] = []
    loader = DataLoader(_CMVNChunks(records, data_cfg, chunk), batch_size=None, num_workers=num_workers)
    with tqdm(total=len(records), desc="cmvn", unit="utt", disable=not progress) as bar:
        for i, (s, s2, n, bad) in enumerate(loader):
            stats.sum += s
            stats.sum_sq += s2
            stats.count += n
            unreadable += bad
            bar.update(min(chunk, len(records) - i * chunk))
    if stats.count == 0:
        raise DataError(f"CMVN: none of the {len(records)} utterances could be read")
    return stats, unreadable
