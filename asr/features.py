"""The model's input features of a waveform, as a config's ``data`` section says: one place.

Training (``asr.data.dataset``), CMVN statistics (``asr.data.cmvn``), decoding and transcription
(``asr.transcribe``) all turn waveforms into features here, so a model is always fed what it was
trained on. Today that is Kaldi's fbank (``asr.audio.fbank_batch``).
"""

from __future__ import annotations

import torch

from .audio import fbank_batch
from .config import DataConfig

__all__ = ["compute_features"]


def compute_features(waveforms: list[torch.Tensor], cfg: DataConfig, dither: float = 0.0) -> list[torch.Tensor]:
    """Features (frames, bins) of each 1-D waveform at ``cfg.sample_rate``: float32, no normalisation.

    Raises ``AudioError`` for a waveform too short for one frame. ``dither`` (training only) draws
    from torch's global RNG.
    """
    return fbank_batch(waveforms, cfg.sample_rate, cfg.num_mel_bins, dither)
