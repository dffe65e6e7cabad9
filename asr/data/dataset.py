"""From manifest records to padded batches: on-the-fly features, and the count of unreadable files.

One utterance (in a DataLoader worker): load (offset/end) -> speed perturbation (training) ->
features (``asr.features``: Kaldi fbank; dither in training) -> normalise and tokenize the text.
``collate`` pads a list of utterances into a :class:`Batch` (decoding and transcription use it too);
``asr.data.augment`` changes a batch (training only), and ``asr.data.filtering`` decides which
records are trained on.
Everything random is a pure function of (seed, epoch, utterance) or of an explicit generator, so a
resumed run sees the same data.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from asr.config import DataConfig
from asr.features import compute_features
from asr.features.audio import AudioError, load_audio, speed_perturb
from asr.text import Tokenizer, normalize

__all__ = ["ASRDataset", "Batch", "DataError", "collate", "check_skip_ratio"]

log = logging.getLogger(__name__)


class DataError(ValueError):
    """Data that cannot be trained on as configured (e.g. too many unreadable files)."""


@dataclass
class Batch:
    """A padded batch. Padding is described by the lengths; pad values are 0."""

    ids: list[str]
    feats: torch.Tensor  # (B, T, F) float32
    feat_lens: torch.Tensor  # (B,) long
    tokens: torch.Tensor  # (B, U) long, 0-padded
    token_lens: torch.Tensor  # (B,) long
    durations: list[float] = field(default_factory=list)  # seconds of audio after speed perturbation
    skipped: int = 0  # utterances of this batch dropped because their audio could not be read
    skipped_ids: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        def mv(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Batch(self.ids, mv(self.feats), mv(self.feat_lens), mv(self.tokens), mv(self.token_lens),
                     self.durations, self.skipped, self.skipped_ids)

    def pin_memory(self) -> Batch:  # called by DataLoader(pin_memory=True)
        return Batch(self.ids, self.feats.pin_memory(), self.feat_lens.pin_memory(), self.tokens.pin_memory(),
                     self.token_lens.pin_memory(), self.durations, self.skipped, self.skipped_ids)


class ASRDataset(Dataset):
    """Manifest records -> ``{"id", "feats" (T, F), "tokens" (U,), "duration", "speed"}``, or None.

    None means the audio could not be read: the file is logged by name and ``collate`` counts it
    in ``Batch.skipped``. In training (``train=True``) the speed factor of each utterance is drawn
    from ``data_cfg.speed_perturb`` as a function of (seed, epoch, index) and fbank dither uses
    a generator seeded the same way, so call :meth:`set_epoch` before each epoch (and do not use
    ``persistent_workers``, whose copies would keep the old epoch).

    The records are kept as one numpy byte buffer of JSON, not as Python dicts: DataLoader workers
    share it with the parent, where a list of dicts would be copied into every worker page by page
    as reference counts change (PyTorch issue 13246; gigabytes on LibriSpeech 960 h).

    With ``data_cfg.cache_features`` (no workers, no dither) the fbank of each (utterance, speed
    factor) is computed once and kept in memory: later epochs only augment and batch it. The
    features are the same as without the cache, so training is too. The audio an utterance's speeds
    are computed from is read (and resampled) once too, and let go when every speed of it is cached.
    """

    def __init__(
        self, records: Sequence[dict[str, Any]], tokenizer: Tokenizer, data_cfg: DataConfig, train: bool,
        seed: int = 0,
    ):
        blobs = [json.dumps(r, ensure_ascii=False).encode("utf-8") for r in records]
        self._offsets = np.cumsum([0] + [len(b) for b in blobs], dtype=np.int64)  # (N + 1,)
        self._blob = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        self._durations = np.array([r["duration"] for r in records], dtype=np.float64)  # (N,)
        self.tokenizer = tokenizer
        self.cfg = data_cfg
        self.train = train
        self.seed = seed
        self.epoch = 0
        self.speed_factors = list(data_cfg.speed_perturb) if train else []
        self.dither = data_cfg.dither if train else 0.0
        self._cache: dict[tuple[int, float], tuple[torch.Tensor, float]] | None = (
            {} if data_cfg.cache_features else None
        )
        self._waves: dict[int, torch.Tensor] = {}  # index -> audio, while some speed of it is not cached

    def __len__(self) -> int:
        return len(self._durations)

    def record(self, index: int) -> dict[str, Any]:
        """The manifest record of utterance ``index`` (a fresh dict)."""
        return json.loads(self._blob[self._offsets[index] : self._offsets[index + 1]].tobytes())

    @property
    def durations(self) -> list[float]:
        """Manifest durations (seconds), in record order: what the batch sampler sorts by."""
        return self._durations.tolist()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _rng(self, index: int) -> random.Random:
        return random.Random(f"{self.seed}:{self.epoch}:{index}")

    def speed_factor(self, index: int, rec: dict[str, Any] | None = None) -> float:
        """The speed factor utterance ``index`` gets: in training drawn for this epoch (1.0 when perturbation
        is off); otherwise the record's ``speed`` (``asr decode --speed``), default 1.0."""
        if not self.train:
            return float((rec if rec is not None else self.record(index)).get("speed", 1.0))
        if not self.speed_factors:
            return 1.0
        return self._rng(index).choice(self.speed_factors)

    def tokens(self, text: str) -> list[int]:
        return self.tokenizer.encode(normalize(text, self.cfg.normalizer))

    def __getitem__(self, index: int) -> dict[str, Any] | None:
        rec = self.record(index)
        factor = self.speed_factor(index, rec)
        key = (index, factor)
        hit = self._cache.get(key) if self._cache is not None else None  # (feats, seconds after perturbation)
        if hit is None:
            try:
                hit = self._features(rec, index, factor)
            except AudioError as e:
                log.warning("skipping utterance %s: %s", rec["id"], e)
                return None
            if self._cache is not None:
                self._cache[key] = hit
                if all((index, f) in self._cache for f in self.speed_factors):
                    self._waves.pop(index, None)
        feats, duration = hit
        return {
            "id": rec["id"],
            "feats": feats,
            "tokens": torch.tensor(self.tokens(rec["text"]), dtype=torch.long),  # (U,)
            "duration": duration,
            "speed": factor,
        }

    def _features(self, rec: dict[str, Any], index: int, factor: float) -> tuple[torch.Tensor, float]:
        """fbank (T, F) of a record at speed ``factor``, and its duration in seconds after perturbation."""
        sr = self.cfg.sample_rate
        wav = self._waves.get(index)
        if wav is None:
            wav = load_audio(rec["audio"], sr, rec.get("offset", 0.0), rec.get("end"))  # (N,)
            if self._cache is not None and len(self.speed_factors) > 1:
                self._waves[index] = wav  # read again for the next speed otherwise
        wav = speed_perturb(wav, sr, factor)
        if self.dither > 0:
            with torch.random.fork_rng(devices=[]):  # dither draws from the global RNG
                torch.manual_seed(self._rng(index).getrandbits(63))
                feats = compute_features([wav], self.cfg, self.dither)[0]
        else:
            feats = compute_features([wav], self.cfg)[0]
        return feats, wav.numel() / sr  # (T, F), seconds


def collate(items: Sequence[dict[str, Any] | None]) -> Batch:
    """Pad utterances into a :class:`Batch`; None items (unreadable audio) are counted in ``skipped``."""
    good = [it for it in items if it is not None]
    skipped = len(items) - len(good)
    if not good:
        empty = torch.zeros(0, dtype=torch.long)
        return Batch([], torch.zeros(0, 0, 0), empty, torch.zeros(0, 0, dtype=torch.long), empty, [], skipped)
    feats = pad_sequence([it["feats"] for it in good], batch_first=True)  # (B, T, F)
    tokens = pad_sequence([it["tokens"] for it in good], batch_first=True, padding_value=0)  # (B, U)
    return Batch(
        ids=[it["id"] for it in good],
        feats=feats,
        feat_lens=torch.tensor([it["feats"].shape[0] for it in good], dtype=torch.long),
        tokens=tokens,
        token_lens=torch.tensor([it["tokens"].numel() for it in good], dtype=torch.long),
        durations=[it["duration"] for it in good],
        skipped=skipped,
    )


def check_skip_ratio(skipped: int, total: int, max_ratio: float, what: str = "epoch") -> None:
    """Raise :class:`DataError` when more than ``max_ratio`` of ``total`` utterances were unreadable."""
    if total > 0 and skipped / total > max_ratio:
        raise DataError(
            f"{what}: {skipped} of {total} utterances ({100 * skipped / total:.2f}%) had unreadable audio, "
            f"more than data.max_skip_ratio={max_ratio} allows; the files are named in the log above"
        )
