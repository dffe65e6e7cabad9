"""Whisper's log-mel spectrogram, for Whisper models (``data.features: whisper``).

What openai-whisper's ``log_mel_spectrogram`` computes, on 16 kHz audio: a 400-point STFT with a
periodic Hann window and hop 160 (centred, reflect-padded; the last frame dropped), the power
spectrum through librosa's Slaney mel filterbank (80 or 128 bands, as Whisper's own filters were
made), log10 floored at 1e-10, everything more than 8 below the utterance's maximum raised to it,
then ``(x + 4) / 4``. The floor depends on the whole utterance, so the features of a 30-second
window are those of the padded audio (``data.pad_to: 30``), as ``whisper.decode`` expects.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

__all__ = ["whisper_log_mel", "whisper_log_mel_batch", "pad_or_trim", "N_FFT", "HOP_LENGTH", "SAMPLE_RATE"]

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160


@lru_cache(maxsize=4)
def _mel_filters(n_mels: int) -> torch.Tensor:
    import librosa

    return torch.from_numpy(librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=n_mels).astype(np.float32))


def pad_or_trim(waveform: torch.Tensor, seconds: float, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """A 1-D waveform cut, or padded with zeros at the end, to ``seconds``."""
    n = round(seconds * sample_rate)
    if waveform.shape[-1] >= n:
        return waveform[..., :n]
    return torch.nn.functional.pad(waveform, (0, n - waveform.shape[-1]))


def whisper_log_mel_batch(waveforms: torch.Tensor, n_mels: int = 80) -> torch.Tensor:
    """Log-mel (B, frames, n_mels) of equally long 16 kHz waveforms (B, samples): frames = samples // 160.

    Each row's floor (8 below its maximum) is its own, so a batch gives each row what it gives alone.
    """
    window = torch.hann_window(N_FFT, device=waveforms.device)
    stft = torch.stft(waveforms.float(), N_FFT, HOP_LENGTH, window=window, return_complex=True)  # (B, 201, T + 1)
    power = stft[..., :-1].abs() ** 2
    mel = _mel_filters(n_mels).to(waveforms.device) @ power  # (B, n_mels, T)
    log = mel.clamp_min(1e-10).log10()
    floor = log.amax(dim=(1, 2), keepdim=True) - 8.0
    return ((torch.maximum(log, floor) + 4.0) / 4.0).transpose(1, 2).contiguous()  # (B, T, n_mels)


def whisper_log_mel(waveform: torch.Tensor, n_mels: int = 80, pad_to: float = 0.0) -> torch.Tensor:
    """Log-mel (frames, n_mels) of one 16 kHz waveform; ``pad_to`` > 0: of the audio padded or cut
    to that many seconds first (Whisper's 30-second window)."""
    if waveform.dim() != 1:
        raise ValueError(f"whisper_log_mel: expected a 1-D waveform, got shape {tuple(waveform.shape)}")
    if pad_to > 0:
        waveform = pad_or_trim(waveform, pad_to)
    if waveform.numel() < N_FFT // 2 + 1:
        from asr.features.audio import AudioError

        raise AudioError(f"{waveform.numel()} samples: too short for one frame of Whisper's log-mel")
    return whisper_log_mel_batch(waveform.unsqueeze(0), n_mels)[0]
