"""Audio in, features out: reading any common file, resampling, Kaldi fbank, speed perturbation.

Everything returns plain float32 tensors. Problems with a file raise :class:`AudioError`, a
``ValueError`` whose message names the file and what was wrong with it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio.compliance.kaldi as kaldi
import torchaudio.functional as AF

__all__ = ["AudioError", "load_audio", "audio_duration", "resample", "fbank", "speed_perturb"]

FRAME_LENGTH_MS = 25.0
FRAME_SHIFT_MS = 10.0


class AudioError(ValueError):
    """A file that cannot be used as speech: missing, unreadable, empty, too short or not finite."""

    def __init__(self, path: str | os.PathLike | None, problem: str):
        self.path = None if path is None else str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


def audio_duration(path: str | os.PathLike) -> float:
    """Duration in seconds from the file header alone (no decoding)."""
    try:
        info = sf.info(str(path))
    except FileNotFoundError as e:
        raise AudioError(path, "no such file") from e
    except Exception as e:  # soundfile raises LibsndfileError / RuntimeError
        raise AudioError(path, f"cannot read audio header ({e})") from e
    if info.samplerate <= 0:
        raise AudioError(path, "header has no sample rate")
    return info.frames / info.samplerate


def resample(waveform: torch.Tensor, orig_freq: int, new_freq: int) -> torch.Tensor:
    """Band-limited (sinc) resampling of a 1-D or (C, N) waveform; a no-op when the rates agree."""
    if orig_freq == new_freq:
        return waveform
    g = math.gcd(int(orig_freq), int(new_freq))
    return AF.resample(waveform, int(orig_freq) // g, int(new_freq) // g)


def load_audio(
    path: str | os.PathLike,
    sample_rate: int = 16000,
    offset: float = 0.0,
    end: float | None = None,
) -> torch.Tensor:
    """Read ``path`` (wav, flac, ogg, mp3, NIST SPHERE, anything libsndfile reads) as mono float32.

    Channels are averaged, the signal is resampled to ``sample_rate``, and ``offset``/``end``
    (seconds) select a segment. Returns a 1-D tensor in [-1, 1].
    """
    p = Path(path)
    if not p.exists():
        raise AudioError(path, "no such file")
    if not p.is_file():
        raise AudioError(path, "not a regular file")
    try:
        with sf.SoundFile(str(p)) as f:
            sr = f.samplerate
            start = int(round(offset * sr)) if offset else 0
            stop = int(round(end * sr)) if end is not None else -1
            if start:
                f.seek(min(start, f.frames))
            frames = -1 if stop < 0 else max(0, stop - start)
            data = f.read(frames=frames, dtype="float32", always_2d=True)  # (N, C)
    except Exception as e:
        raise AudioError(path, f"unreadable or corrupt audio ({e})") from e
    if data.shape[0] == 0:
        raise AudioError(path, "no samples")
    if not np.isfinite(data).all():
        raise AudioError(path, "contains NaN or infinite samples")
    wav = torch.from_numpy(data.mean(axis=1) if data.shape[1] > 1 else data[:, 0].copy())  # (N,)
    wav = resample(wav, sr, sample_rate)
    min_samples = int(sample_rate * FRAME_LENGTH_MS / 1000)
    if wav.numel() < min_samples:
        raise AudioError(
            path, f"too short: {wav.numel()} samples at {sample_rate} Hz, one 25 ms frame needs {min_samples}"
        )
    return wav.contiguous()


def fbank(
    waveform: torch.Tensor,
    sample_rate: int = 16000,
    num_mel_bins: int = 80,
    dither: float = 0.0,
) -> torch.Tensor:
    """Kaldi-compatible log-mel filterbank of a 1-D waveform in [-1, 1]: (frames, num_mel_bins).

    Kaldi's defaults: 25 ms windows every 10 ms, povey window, pre-emphasis 0.97, DC removal,
    snip edges, power spectrum, energy floor 0. The signal is scaled to int16 range first, as
    Kaldi reads integer PCM. Computed in float64 (then returned as float32): in float32 the
    log of a nearly empty mel band drifts by up to 3e-3 from Kaldi's; in float64 it stays within 1e-3.
    """
    if waveform.dim() != 1:
        raise ValueError(f"fbank expects a 1-D waveform, got shape {tuple(waveform.shape)}")
    if waveform.numel() < int(sample_rate * FRAME_LENGTH_MS / 1000):
        raise AudioError(None, f"too short for one frame: {waveform.numel()} samples at {sample_rate} Hz")
    return kaldi.fbank(
        waveform.to(torch.float64).unsqueeze(0) * 32768.0,
        sample_frequency=float(sample_rate),
        num_mel_bins=num_mel_bins,
        frame_length=FRAME_LENGTH_MS,
        frame_shift=FRAME_SHIFT_MS,
        dither=dither,
        energy_floor=0.0,
        window_type="povey",
        preemphasis_coefficient=0.97,
        remove_dc_offset=True,
        snip_edges=True,
    ).to(torch.float32)


def num_frames(num_samples: int, sample_rate: int = 16000) -> int:
    """Frames ``fbank`` yields for a signal of ``num_samples`` (snip edges)."""
    win = int(sample_rate * FRAME_LENGTH_MS / 1000)
    hop = int(sample_rate * FRAME_SHIFT_MS / 1000)
    return 0 if num_samples < win else 1 + (num_samples - win) // hop


def speed_perturb(waveform: torch.Tensor, sample_rate: int, factor: float) -> torch.Tensor:
    """Play ``waveform`` ``factor`` times faster (pitch moves too), as Kaldi's and ESPnet's sox speed.

    Done by resampling from ``sample_rate * factor`` to ``sample_rate``: 1.1 makes it 10% shorter.
    """
    if factor == 1.0:
        return waveform
    return resample(waveform, int(round(sample_rate * factor)), sample_rate)
