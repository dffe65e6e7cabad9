"""load_audio on every format and rate in ../shared/data, its errors, and fbank against Kaldi."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from asr.features.audio import AudioError, audio_duration, fbank, load_audio, num_frames, speed_perturb


def _first(root, pattern):
    files = sorted(root.glob(pattern))
    assert files, f"no {pattern} under {root}"
    return files[0]


@pytest.mark.parametrize(
    "pattern,native_rate",
    [
        ("fsdd/recordings/*.wav", 8000),
        ("LibriSpeech/*/*/*/*.flac", 16000),
        ("ljspeech_sample/wavs/*.wav", 22050),
        ("an4_sample/wav/*/*/*.sph", 16000),
    ],
)
def test_load_audio_real_formats(data_root, pattern, native_rate):
    path = _first(data_root, pattern)
    assert sf.info(str(path)).samplerate == native_rate
    wav = load_audio(path)
    assert wav.dtype == torch.float32 and wav.dim() == 1
    assert torch.isfinite(wav).all() and wav.abs().max() <= 1.0 + 1e-4
    assert wav.abs().max() > 1e-3, "real speech should not be silent"
    expected = audio_duration(path) * 16000
    assert abs(wav.numel() - expected) <= 2
    native = load_audio(path, sample_rate=native_rate)
    assert abs(native.numel() - sf.info(str(path)).frames) == 0


@pytest.mark.parametrize("fmt,ext,rate", [("OGG", "ogg", 48000), ("MP3", "mp3", 44100), ("FLAC", "flac", 48000)])
def test_load_audio_other_containers_and_rates(data_root, tmp_path, fmt, ext, rate):
    if fmt not in sf.available_formats():
        pytest.skip(f"this libsndfile cannot write {fmt}")
    src = load_audio(_first(data_root, "LibriSpeech/*/*/*/*.flac"), sample_rate=rate).numpy()
    stereo = np.stack([src, 0.5 * src], axis=1)
    path = tmp_path / f"x.{ext}"
    sf.write(str(path), stereo, rate, format=fmt)
    wav = load_audio(path)
    assert abs(wav.numel() - len(src) * 16000 / rate) <= 0.01 * 16000 + 2000  # mp3 adds codec delay/padding
    assert torch.isfinite(wav).all()


def test_load_audio_mixes_channels_and_segments(tmp_path):
    sr = 16000
    t = np.arange(sr) / sr
    left, right = 0.5 * np.sin(2 * np.pi * 440 * t), 0.1 * np.sin(2 * np.pi * 220 * t)
    path = tmp_path / "stereo.wav"
    sf.write(str(path), np.stack([left, right], 1).astype(np.float32), sr, subtype="FLOAT")
    wav = load_audio(path)
    np.testing.assert_allclose(wav.numpy(), ((left + right) / 2).astype(np.float32), atol=1e-6)
    seg = load_audio(path, offset=0.25, end=0.5)
    np.testing.assert_allclose(seg.numpy(), wav[4000:8000].numpy(), atol=1e-6)


def _write(path, data, sr=16000, subtype="FLOAT"):
    sf.write(str(path), np.asarray(data, dtype=np.float32), sr, subtype=subtype)
    return path


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: d / "missing.wav", "no such file"),
        (lambda d: (d / "corrupt.wav").write_bytes(b"RIFF\x00\x01garbage" * 10) and d / "corrupt.wav", "corrupt"),
        (lambda d: _write(d / "empty.wav", np.zeros(0)), "no samples"),
        (lambda d: _write(d / "short.wav", np.zeros(100) + 0.1), "too short"),
        (lambda d: _write(d / "nan.wav", np.r_[np.zeros(8000), np.nan, np.zeros(8000)]), "NaN"),
        (lambda d: _write(d / "inf.wav", np.r_[np.zeros(8000), np.inf, np.zeros(8000)]), "infinite"),
    ],
    ids=["missing", "corrupt", "empty", "short", "nan", "inf"],
)
def test_load_audio_bad_input(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(AudioError, match=message) as e:
        load_audio(path)
    assert isinstance(e.value, ValueError)
    assert str(path) in str(e.value), "the error must name the file"


def _kaldi_native(wav: torch.Tensor, sr: int = 16000) -> torch.Tensor:
    knf = pytest.importorskip("kaldi_native_fbank")
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = sr
    opts.frame_opts.dither = 0.0
    opts.frame_opts.snip_edges = True
    opts.mel_opts.num_bins = 80
    opts.energy_floor = 0.0
    f = knf.OnlineFbank(opts)
    f.accept_waveform(sr, (wav * 32768.0).tolist())
    f.input_finished()
    return torch.tensor(np.array([f.get_frame(i) for i in range(f.num_frames_ready)]))


# A mel band more than this many nats below its frame's largest band holds a power of less than
# e^-20 (about 2e-9) of the peak: float32 (Kaldi's and kaldi-native-fbank's BaseFloat) cannot resolve
# it to 2e-3 (torchaudio's own float32 fbank lands as far from the float64 value as knf does).
FLOAT32_RESOLVED_NATS = 20.0


def test_fbank_matches_kaldi_native_fbank_on_16k_speech(data_root):
    """All 58 shared LibriSpeech utterances: max 2e-3 wherever float32 resolves the value, mean 2e-5."""
    diffs, resolved = [], []
    for path in sorted(data_root.glob("LibriSpeech/*/*/*/*.flac")):
        wav = load_audio(path)
        ours = fbank(wav)
        ref = _kaldi_native(wav)
        assert ours.shape == ref.shape == (num_frames(wav.numel()), 80)
        d = (ours - ref).abs()
        diffs.append(d)
        resolved.append(d[ours >= ours.amax(1, keepdim=True) - FLOAT32_RESOLVED_NATS])
    assert len(diffs) == 58
    d, r = torch.cat(diffs), torch.cat(resolved)
    print(f"fbank vs kaldi-native-fbank (16 kHz): max {r.max():.2e} on {r.numel() / d.numel():.4%} of values "
          f"within {FLOAT32_RESOLVED_NATS:.0f} nats of their frame's peak; max {d.max():.2e} overall; "
          f"mean {d.mean():.2e}")
    assert r.numel() / d.numel() > 0.999
    assert r.max() <= 2e-3
    assert d.mean() <= 2e-5
    assert d.max() <= 5e-2  # float32's error in the emptiest bands, never more


def test_kaldi_native_fbank_differs_from_float64_like_float32_does(data_root):
    """The worst knf disagreement (a band 26 nats below its frame's peak) is float32 rounding:
    torchaudio's fbank computed in float32 is as far from the float64 value there."""
    from torchaudio.compliance import kaldi

    path = next(data_root.glob("LibriSpeech/*/*/*/2414-128291-0004.flac"))
    wav = load_audio(path)
    ours, ref = fbank(wav), _kaldi_native(wav)
    f32 = kaldi.fbank(wav.unsqueeze(0) * 32768.0, num_mel_bins=80, dither=0.0, energy_floor=0.0)
    t, f = divmod(int((ours - ref).abs().argmax()), 80)
    assert float(ours[t].max() - ours[t, f]) > FLOAT32_RESOLVED_NATS
    knf_err, f32_err = abs(float(ref[t, f] - ours[t, f])), abs(float(f32[t, f] - ours[t, f]))
    assert knf_err > 2e-3 and f32_err > 2e-3 and 0.2 < f32_err / knf_err < 5


def test_fbank_matches_kaldi_native_fbank_on_resampled_8k(data_root):
    diffs = [
        (fbank(w) - _kaldi_native(w)).abs()
        for w in (load_audio(p) for p in sorted(data_root.glob("fsdd/recordings/*_george_*.wav"))[:10])
    ]
    d = torch.cat(diffs)
    print(f"fbank vs kaldi-native-fbank (8 kHz -> 16 kHz): mean {d.mean():.2e}")
    assert d.mean() <= 5e-3


def test_fbank_rejects_too_short_and_speed_perturb_changes_length():
    with pytest.raises(AudioError, match="too short"):
        fbank(torch.zeros(200))
    wav = torch.randn(16000) * 0.1
    assert abs(speed_perturb(wav, 16000, 1.1).numel() - 16000 / 1.1) <= 1
    assert abs(speed_perturb(wav, 16000, 0.9).numel() - 16000 / 0.9) <= 1
    assert speed_perturb(wav, 16000, 1.0) is wav
