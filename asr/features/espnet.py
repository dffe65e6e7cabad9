"""ESPnet's default frontend, so that models trained on it (ESPnet's published ones) get the features they expect.

ESPnet2's ``DefaultFrontend``: a centred STFT (reflect padding, periodic Hann window of
``win_length`` centred in ``n_fft``), the power spectrum, librosa's Slaney mel filterbank
(0 Hz to Nyquist, area-normalised), the natural log of the mel energies floored at 1e-10.
It is not Kaldi's fbank (no dither, pre-emphasis, DC removal or povey window; frames centred,
so one more of them), which is why a model trained on one cannot be fed the other.

ESPnet computes it on the zero-padded batch of waveforms: the last ``n_fft // 2`` samples of a
shorter utterance then see zeros, not its reflection, and padded frames are set to 0.
:func:`espnet_log_mel` does exactly that for a padded batch; the data pipeline computes one
utterance at a time (a batch of one, which is what ESPnet's ``Speech2Text`` does too).
"""

from __future__ import annotations

import functools

import librosa
import torch

__all__ = ["espnet_log_mel", "espnet_fbank", "espnet_num_frames"]

_FLOOR = 1e-10  # ESPnet's LogMel clamps mel energies here before the log


@functools.lru_cache(maxsize=8)
def _mel_matrix(sample_rate: int, n_fft: int, n_mels: int) -> torch.Tensor:
    """librosa's mel filterbank, transposed as ESPnet keeps it: (n_fft // 2 + 1, n_mels), float32."""
    mel = librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=0.0, fmax=sample_rate / 2, htk=False)
    return torch.from_numpy(mel.T).float()


def espnet_num_frames(num_samples: torch.Tensor | int, n_fft: int, hop_length: int):
    """Frames of a centred STFT of ``num_samples``: ESPnet's ``(n + 2 * (n_fft // 2) - n_fft) // hop + 1``."""
    return (num_samples + 2 * (n_fft // 2) - n_fft) // hop_length + 1


def espnet_log_mel(
    wavs: torch.Tensor,
    lens: torch.Tensor,
    sample_rate: int = 16000,
    n_fft: int = 512,
    win_length: int = 400,
    hop_length: int = 160,
    n_mels: int = 80,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-mel features (B, T, n_mels) and frame counts (B,) of zero-padded waveforms (B, N) in [-1, 1]."""
    window = torch.hann_window(win_length, dtype=torch.float32, device=wavs.device)
    spec = torch.stft(
        wavs.float(), n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window,
        center=True, normalized=False, onesided=True, return_complex=True,
    ).transpose(1, 2)  # (B, T, n_fft // 2 + 1)
    power = spec.real.square() + spec.imag.square()
    feats = (power @ _mel_matrix(int(sample_rate), n_fft, n_mels).to(wavs.device)).clamp_min(_FLOOR).log()
    frames = espnet_num_frames(lens, n_fft, hop_length)  # (B,)
    keep = torch.arange(feats.shape[1], device=wavs.device) < frames.unsqueeze(1)  # (B, T)
    return feats.masked_fill(~keep.unsqueeze(-1), 0.0), frames


def espnet_fbank(
    waveform: torch.Tensor,
    sample_rate: int = 16000,
    n_fft: int = 512,
    win_length: int = 400,
    hop_length: int = 160,
    n_mels: int = 80,
) -> torch.Tensor:
    """:func:`espnet_log_mel` of one 1-D waveform: (frames, n_mels)."""
    if waveform.dim() != 1:
        raise ValueError(f"espnet_fbank expects a 1-D waveform, got shape {tuple(waveform.shape)}")
    if waveform.numel() <= n_fft // 2:  # reflect padding needs more samples than it pads
        raise ValueError(f"too short for ESPnet's STFT: {waveform.numel()} samples, n_fft={n_fft}")
    lens = torch.tensor([waveform.numel()])
    return espnet_log_mel(waveform.unsqueeze(0), lens, sample_rate, n_fft, win_length, hop_length, n_mels)[0][0]
