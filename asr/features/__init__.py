"""The model's input features of a waveform, as a config's ``data`` section says: one place.

Training (``asr.data.dataset``), CMVN statistics (``asr.data.cmvn``), decoding and transcription
(``asr.inference.transcribe``) all turn waveforms into features here, so a model is always fed what it was
trained on: Kaldi's fbank (``asr.features.audio.fbank_batch``) or, for models imported from ESPnet, ESPnet's
STFT log-mel (``asr.features.espnet``) or, for Whisper models, Whisper's log-mel
(``asr.features.whisper``), as ``data.features`` says.
"""

from __future__ import annotations

import torch

from asr.config import DataConfig
from asr.features.audio import fbank_batch

__all__ = ["compute_features"]


def compute_features(waveforms: list[torch.Tensor], cfg: DataConfig, dither: float = 0.0) -> list[torch.Tensor]:
    """Features (frames, bins) of each 1-D waveform at ``cfg.sample_rate``: float32, no normalisation.

    Raises ``AudioError`` for a waveform too short for one frame. ``dither`` (training only) draws
    from torch's global RNG.
    """
    if cfg.pad_to > 0:  # cut or padded with zeros to one length (Whisper's 30-second window)
        from asr.features.whisper import pad_or_trim

        waveforms = [pad_or_trim(w, cfg.pad_to, cfg.sample_rate) for w in waveforms]
    if cfg.features == "whisper":  # Whisper's log-mel, for Whisper models
        from asr.features.whisper import whisper_log_mel, whisper_log_mel_batch

        if cfg.pad_to > 0 and waveforms:  # equally long: one batched STFT, each row floored by its own maximum
            return list(whisper_log_mel_batch(torch.stack(waveforms), cfg.num_mel_bins).unbind(0))
        return [whisper_log_mel(w, cfg.num_mel_bins) for w in waveforms]
    if cfg.features == "espnet":  # ESPnet's STFT log-mel, for imported ESPnet models (no dither there)
        from asr.features.espnet import espnet_fbank

        return [espnet_fbank(w, cfg.sample_rate, cfg.n_fft, cfg.win_length, cfg.hop_length, cfg.num_mel_bins)
                for w in waveforms]
    return fbank_batch(waveforms, cfg.sample_rate, cfg.num_mel_bins, dither)
