"""Training augmentations of a padded fbank batch (B, T, F), on any device, from one generator.

:func:`augment` is what the training loop calls: local tempo, then synthetic noise, then
SpecAugment (time warp, frequency warp, frequency and time masks), each as the data config says.
Every draw comes from the generator it is given, so a resumed run (which restores the generator)
augments exactly as an uninterrupted one.
"""

from __future__ import annotations

import math

import torch
import torchaudio.compliance.kaldi as kaldi

from asr.config import DataConfig, NoiseConfig, SpecAugmentConfig
from asr.features.audio import MEL_LOW_FREQ, fbank_batch

__all__ = ["augment", "spec_augment", "tempo_perturb", "add_noise", "freq_warp"]


def augment(
    feats: torch.Tensor, feat_lens: torch.Tensor, cfg: DataConfig, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training augmentations of ``cfg`` applied to a batch: (features, lengths; tempo changes them)."""
    sa = cfg.specaugment
    if sa is not None and sa.tempo > 0:
        feats, feat_lens = tempo_perturb(feats, feat_lens, sa.tempo, sa.tempo_span, generator)
    if cfg.noise.prob > 0:
        feats = add_noise(feats, feat_lens, cfg.noise, cfg.sample_rate, generator)
    if sa is not None:
        feats = spec_augment(feats, feat_lens, sa, generator, cfg.sample_rate)
    return feats, feat_lens


def _uniform(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """U[0, 1) drawn on the generator's device (a CPU generator can drive a GPU batch), moved to ``device``."""
    gdev = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=gdev).to(device)


def _time_warp(
    x: torch.Tensor, lens: torch.Tensor, max_warp: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Move a random point c of each utterance to c + U[-W, W], stretching both sides linearly.

    Utterances too short for the warp (length <= 2W + 1) are left as they are; padding frames
    are never read or moved.
    """
    b, t, _ = x.shape
    dev = x.device
    lens = lens.to(dev)
    u = _uniform((b, 2), generator, dev)
    ok = lens > 2 * max_warp + 1
    lf = lens.clamp_min(2 * max_warp + 2).float()
    centre = max_warp + (u[:, 0] * (lf - 2 * max_warp)).floor()  # in [W, L - W)
    moved = (centre + (u[:, 1] * (2 * max_warp + 1)).floor() - max_warp).clamp_min(1).minimum(lf - 2)
    pos = torch.arange(t, device=dev, dtype=torch.float32).unsqueeze(0)  # (1, T)
    c, w, L = centre.unsqueeze(1), moved.unsqueeze(1), lf.unsqueeze(1)
    src = torch.where(pos < w, pos * c / w, c + (pos - w) * (L - 1 - c) / (L - 1 - w).clamp_min(1))  # (B, T)
    inside = ok.unsqueeze(1) & (pos < lens.unsqueeze(1))
    src = torch.where(inside, src, pos)
    return _read_at(x, src, lens)


def _read_at(x: torch.Tensor, src: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Frames of ``x`` (B, T, F) read at fractional positions ``src`` (B, T'), linearly interpolated
    between neighbours inside each utterance's ``lens`` (B,): (B, T', F)."""
    t = x.shape[1]
    lo = src.floor().long().clamp(0, t - 1)
    hi = torch.minimum(lo + 1, (lens.unsqueeze(1) - 1).clamp_min(0)).clamp(0, t - 1)
    frac = (src - lo.float()).clamp(0, 1).unsqueeze(-1)  # (B, T', 1)
    shape = (*src.shape, x.shape[2])
    return x.gather(1, lo.unsqueeze(-1).expand(shape)) * (1 - frac) + x.gather(1, hi.unsqueeze(-1).expand(shape)) * frac


def tempo_perturb(
    feats: torch.Tensor, feat_lens: torch.Tensor, max_change: float, span: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Local tempo perturbation of a padded batch (B, T, F): returns new features and lengths.

    Each utterance is cut into pieces of ``span`` frames and each piece is played at its own rate,
    drawn log-uniformly in [1 / (1 + max_change), 1 + max_change] (> 1: faster, fewer frames), with
    the time axis stretched piecewise linearly and frames linearly interpolated. Speed perturbation
    moves tempo and pitch together and by one factor per utterance; speakers differ far more in how
    long they hold each word (in FSDD one speaker's SIX lasts 2.6 times another's), and this varies
    the durations word by word with the spectrum left alone. Padding frames are never read.
    """
    b, t, f = feats.shape
    dev = feats.device
    lens = feat_lens.to(dev)
    if b == 0 or t == 0 or max_change <= 0:
        return feats.clone(), lens.clone()
    k = -(-t // span)
    u = _uniform((b, k), generator, dev)
    rate = torch.exp((2 * u - 1) * math.log1p(max_change))  # (B, K)
    edges = torch.arange(k + 1, device=dev, dtype=torch.float32) * span
    src_knots = torch.minimum(edges.unsqueeze(0), lens.unsqueeze(1).float())  # (B, K + 1) piece edges in input
    dur = src_knots.diff(dim=1) / rate  # output frames per piece (0 past the end)
    out_knots = torch.cat([torch.zeros(b, 1, device=dev), dur.cumsum(1)], dim=1)
    new_lens = torch.where(lens > 0, out_knots[:, -1].round().long().clamp_min(1), 0)
    pos = torch.arange(int(new_lens.max()), device=dev, dtype=torch.float32).expand(b, -1).contiguous()
    piece = (torch.searchsorted(out_knots.contiguous(), pos, right=True) - 1).clamp(0, k - 1)  # (B, T')
    src = src_knots.gather(1, piece) + (pos - out_knots.gather(1, piece)) * rate.gather(1, piece)
    src = torch.minimum(src, (lens.unsqueeze(1) - 1).clamp_min(0).float())
    y = _read_at(feats, src, lens)
    return y.masked_fill((pos >= new_lens.unsqueeze(1)).unsqueeze(-1), 0.0), new_lens


def freq_warp(x: torch.Tensor, alpha: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """Vocal tract length perturbation (Jaitly & Hinton, 2013) of Kaldi log-mel features (B, T, F).

    Each utterance's spectrum is stretched along linear frequency by its ``alpha`` (B,) (> 1: a
    shorter vocal tract, formants move up), piecewise linearly so that the top 20% of the band is
    squeezed to keep the Nyquist frequency in place. Band i (centred at c_i, Kaldi's layout: 20 Hz to
    Nyquist) then reads the unwarped features at frequency c_i / alpha, linearly interpolated between
    the neighbouring bands (edges held). Speed perturbation moves pitch and formants together; this
    moves the formants alone.
    """
    b, t, f = x.shape
    nyq = sample_rate / 2
    lo_m, hi_m = kaldi.mel_scale(torch.tensor([MEL_LOW_FREQ, nyq], dtype=torch.float64))
    delta = (hi_m - lo_m) / (f + 1)  # Kaldi's bands: centres evenly spaced in mel
    centre = kaldi.inverse_mel_scale(lo_m + delta * torch.arange(1, f + 1))  # (F,) Hz
    a = alpha.detach().cpu().double().unsqueeze(1)  # (B, 1)
    knee = 0.8 * nyq
    top = knee / a + (centre - knee) * (nyq - knee / a) / (nyq - knee)
    src = torch.where(centre <= knee, centre / a, top)  # (B, F) Hz
    pos = ((kaldi.mel_scale(src) - lo_m) / delta - 1).clamp(0, f - 1).to(x.device)
    lo = pos.floor().long()
    hi = (lo + 1).clamp_max(f - 1)
    frac = (pos - lo).to(x.dtype).unsqueeze(1)  # (B, 1, F)
    lo, hi = lo.unsqueeze(1).expand(b, t, f), hi.unsqueeze(1).expand(b, t, f)
    return x.gather(2, lo) * (1 - frac) + x.gather(2, hi) * frac


_WHITE_FBANK: dict[tuple[int, int, torch.device], torch.Tensor] = {}
DB = math.log(10) / 10  # one decibel of power in nats (fbank is the natural log of power)


def _white_fbank(sample_rate: int, num_mel_bins: int, device: torch.device) -> torch.Tensor:
    """Kaldi fbank of 20 s of white noise (seed fixed), shifted so that its mean power is 1: (2000, F),
    computed once per (rate, bins) and kept on ``device``."""
    key = (sample_rate, num_mel_bins, device)
    if key not in _WHITE_FBANK:
        g = torch.Generator().manual_seed(0)
        f = fbank_batch([0.1 * torch.randn(20 * sample_rate, generator=g)], sample_rate, num_mel_bins)[0]
        _WHITE_FBANK[key] = (f - f.exp().mean().log()).to(device)
    return _WHITE_FBANK[key]


def add_noise(
    feats: torch.Tensor,
    feat_lens: torch.Tensor,
    cfg: NoiseConfig,
    sample_rate: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Stationary noise of random colour added to a padded batch of Kaldi fbank (B, T, F) in the
    power domain: ``log(exp(x) + exp(n))``, exact in expectation for independent noise.

    Each utterance, with probability ``cfg.prob``, gets white noise's own fbank (so each band
    fluctuates frame to frame as real noise does), its spectrum tilted by U[-tilt, tilt] dB from the
    lowest to the highest band and one narrow band (a Gaussian 1-3 bands wide; hum, a fan's whine)
    raised by U[0, peak] dB, scaled to an SNR of U[snr_min, snr_max] dB against the utterance's mean
    power over its frames. Recordings differ in noise floor and colour far more than a few training
    speakers show (in FSDD one speaker records at about 17 dB SNR, another with a hum); utterance CMN
    removes a channel's gain and colour but not an additive floor. Padding frames stay as they are.
    Returns a new tensor.
    """
    b, t, f = feats.shape
    dev = feats.device
    if b == 0 or t == 0 or cfg.prob <= 0:
        return feats.clone()
    lens = feat_lens.to(dev)
    bank = _white_fbank(sample_rate, f, dev)
    u = _uniform((b, 7), generator, dev)
    band = torch.arange(f, device=dev, dtype=torch.float32)  # (F,)
    tilt = (2 * u[:, 1:2] - 1) * cfg.tilt_db * (band / max(f - 1, 1) - 0.5)  # (B, F) dB
    width = 1 + 2 * u[:, 2:3]
    peak = cfg.peak_db * u[:, 3:4] * torch.exp(-0.5 * ((band - u[:, 4:5] * (f - 1)) / width) ** 2)
    shape = (tilt + peak) * DB  # (B, F) nats
    rows = ((u[:, 5:6] * bank.shape[0]).long() + torch.arange(t, device=dev)) % bank.shape[0]  # (B, T)
    noise = bank[rows] + shape.unsqueeze(1)  # (B, T, F), before the level
    valid = (torch.arange(t, device=dev).unsqueeze(0) < lens.unsqueeze(1)).unsqueeze(-1)  # (B, T, 1)
    count = (lens.clamp_min(1) * f).float().log()
    speech = torch.where(valid, feats, -torch.inf).flatten(1).logsumexp(1) - count  # (B,) log mean power
    floor = torch.where(valid, noise, -torch.inf).flatten(1).logsumexp(1) - count
    snr = cfg.snr_min + (cfg.snr_max - cfg.snr_min) * u[:, 6]
    level = speech - floor - snr * DB  # (B,)
    noisy = torch.logaddexp(feats, noise + level.view(b, 1, 1))
    pick = (u[:, 0] < cfg.prob).view(b, 1, 1) & valid
    return torch.where(pick, noisy, feats)


def _band_mask(
    size: int, count: int, max_width: torch.Tensor, limit: torch.Tensor, generator: torch.Generator | None,
    device: torch.device,
) -> torch.Tensor:
    """(B, size) True inside ``count`` random bands per row, each of width U{0..max_width} inside [0, limit)."""
    b = limit.shape[0]
    u = _uniform((b, count, 2), generator, device)
    width = (u[..., 0] * (max_width.unsqueeze(1) + 1)).floor().minimum(limit.unsqueeze(1))  # (B, n)
    start = (u[..., 1] * (limit.unsqueeze(1) - width + 1)).floor()  # (B, n)
    pos = torch.arange(size, device=device).view(1, 1, size)
    inside = (pos >= start.unsqueeze(-1)) & (pos < (start + width).unsqueeze(-1))  # (B, n, size)
    return inside.any(dim=1)


def spec_augment(
    feats: torch.Tensor,
    feat_lens: torch.Tensor,
    cfg: SpecAugmentConfig,
    generator: torch.Generator | None = None,
    sample_rate: int | None = None,
) -> torch.Tensor:
    """SpecAugment (Park et al., 2019) on a padded batch (B, T, F): time warp, frequency warp
    (VTLP, needs ``sample_rate``), frequency and time masks.

    Masked values are set to 0, as in ESPnet and WeNet (features are raw fbank; CMVN is in the
    model). Time masks are as wide as ``cfg.time_width`` (frames, or a share of each utterance's
    own length when < 1) and stay inside the utterance. Returns a new tensor.
    """
    if feats.dim() != 3:
        raise ValueError(f"spec_augment expects (B, T, F) features, got shape {tuple(feats.shape)}")
    b, t, f = feats.shape
    dev = feats.device
    if b == 0 or t == 0:
        return feats.clone()
    lens = feat_lens.to(dev)
    x = _time_warp(feats, lens, cfg.time_warp, generator) if cfg.time_warp > 0 else feats.clone()
    if cfg.freq_warp > 0:
        if sample_rate is None:
            raise ValueError("data.specaugment.freq_warp needs the features' sample_rate")
        alpha = 1 - cfg.freq_warp + 2 * cfg.freq_warp * _uniform((b,), generator, dev)  # U[1 - w, 1 + w]
        x = freq_warp(x, alpha, sample_rate)
    keep = torch.ones(b, t, f, dtype=torch.bool, device=dev)
    if cfg.freq_masks > 0 and cfg.freq_width > 0:
        full = torch.full((b,), f, device=dev, dtype=torch.float32)
        fmask = _band_mask(f, cfg.freq_masks, torch.full_like(full, cfg.freq_width), full, generator, dev)  # (B, F)
        keep &= ~fmask.unsqueeze(1)
    if cfg.time_masks > 0 and cfg.time_width > 0:
        lf = lens.float()
        max_w = (cfg.time_width * lf).floor() if cfg.time_width < 1 else torch.full_like(lf, cfg.time_width)
        tmask = _band_mask(t, cfg.time_masks, max_w, lf, generator, dev)  # (B, T)
        keep &= ~tmask.unsqueeze(2)
    return x.masked_fill(~keep, 0.0)
