"""fbank_batch: the batched, mixed-precision fbank agrees with fbank (and so with Kaldi)."""

import pytest
import torch

from asr.features.audio import AudioError, fbank, fbank_batch, load_audio, num_frames


def _max_mean(a: list[torch.Tensor], b: list[torch.Tensor]) -> tuple[float, float]:
    d = torch.cat([(x - y).abs() for x, y in zip(a, b, strict=True)])
    return d.max().item(), d.mean().item()


def test_fbank_batch_equals_fbank_on_16k_speech(data_root):
    wavs = [load_audio(p) for p in sorted(data_root.glob("LibriSpeech/*/*/*/*.flac"))[:12]]
    ours = fbank_batch(wavs)
    ref = [fbank(w) for w in wavs]
    assert [o.shape for o in ours] == [(num_frames(w.numel()), 80) for w in wavs]
    assert all(o.dtype == torch.float32 for o in ours)
    dmax, dmean = _max_mean(ours, ref)
    print(f"fbank_batch vs fbank (16 kHz): max {dmax:.2e} mean {dmean:.2e}")
    assert dmax <= 2e-3 and dmean <= 2e-5


def test_fbank_batch_equals_fbank_on_8k_and_resampled(data_root):
    paths = sorted(data_root.glob("fsdd/recordings/*_jackson_*.wav"))[:8]
    at8k = [load_audio(p, sample_rate=8000) for p in paths]
    dmax, dmean = _max_mean(fbank_batch(at8k, 8000, 40), [fbank(w, 8000, 40) for w in at8k])
    assert dmax <= 2e-3 and dmean <= 2e-5
    at16k = [load_audio(p) for p in paths]  # nearly empty upper bands: the float64 path
    dmax, dmean = _max_mean(fbank_batch(at16k), [fbank(w) for w in at16k])
    assert dmax <= 2e-3 and dmean <= 2e-5


def test_fbank_batch_silence_and_quiet_frames_match():
    g = torch.Generator().manual_seed(0)
    loud = torch.randn(8000, generator=g) * 0.3
    wav = torch.cat([torch.zeros(4000), loud, torch.randn(4000, generator=g) * 1e-6])  # (16000,)
    (ours,) = fbank_batch([wav])
    ref = fbank(wav)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max() <= 2e-3  # digital silence gives log(float64 eps) in both


def test_fbank_batch_dither_and_errors():
    wav = torch.randn(3200) * 0.1
    a, b = fbank_batch([wav, wav], dither=1.0)
    assert a.shape == b.shape == (num_frames(3200), 80)
    assert not torch.equal(a, b)  # independent noise per call
    assert (a - fbank(wav)).abs().mean() < 0.1
    assert fbank_batch([]) == []
    with pytest.raises(AudioError, match="too short"):
        fbank_batch([wav, torch.zeros(100)])
    with pytest.raises(ValueError, match="1-D"):
        fbank_batch([wav.view(2, -1)])
