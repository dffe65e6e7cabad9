"""From manifest records to padded batches: on-the-fly features, filtering, SpecAugment, CMVN stats.

One utterance (in a DataLoader worker): load (offset/end) -> speed perturbation (training) ->
Kaldi fbank (``asr.audio.fbank_batch``: float32 with float64 fix-ups, within 2e-3 of ``fbank`` and
about 3x faster; dither in training) -> normalise and tokenize the text. ``collate`` pads a list of
utterances into a :class:`Batch`; ``tempo_perturb``, ``add_noise`` and ``spec_augment`` change a
batch (training only, on any device).
Everything random is a pure function of (seed, epoch, utterance) or of an explicit generator, so a
resumed run sees the same data.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torchaudio.compliance.kaldi as kaldi
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from ..audio import MEL_LOW_FREQ, AudioError, fbank_batch, load_audio, num_frames, speed_perturb
from ..config import DataConfig, NoiseConfig, SpecAugmentConfig
from ..text import Tokenizer, normalize

__all__ = [
    "ASRDataset",
    "Batch",
    "DataError",
    "collate",
    "spec_augment",
    "tempo_perturb",
    "add_noise",
    "filter_records",
    "check_skip_ratio",
    "ctc_min_frames",
    "compute_cmvn_stats",
]

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
    features are the same as without the cache, so training is too.
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

    def speed_factor(self, index: int) -> float:
        """The speed factor utterance ``index`` gets this epoch (1.0 when perturbation is off)."""
        if not self.speed_factors:
            return 1.0
        return self._rng(index).choice(self.speed_factors)

    def tokens(self, text: str) -> list[int]:
        return self.tokenizer.encode(normalize(text, self.cfg.normalizer))

    def __getitem__(self, index: int) -> dict[str, Any] | None:
        rec = self.record(index)
        factor = self.speed_factor(index)
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
        wav = load_audio(rec["audio"], sr, rec.get("offset", 0.0), rec.get("end"))  # (N,)
        wav = speed_perturb(wav, sr, factor)
        if self.dither > 0:
            with torch.random.fork_rng(devices=[]):  # dither draws from the global RNG
                torch.manual_seed(self._rng(index).getrandbits(63))
                feats = fbank_batch([wav], sr, self.cfg.num_mel_bins, self.dither)[0]
        else:
            feats = fbank_batch([wav], sr, self.cfg.num_mel_bins)[0]
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


# --------------------------------------------------------------------------------------------- SpecAugment


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


# ------------------------------------------------------------------------------------------------ filtering


def ctc_min_frames(tokens: Sequence[int]) -> int:
    """Fewest encoder frames a CTC alignment of ``tokens`` needs: one per token plus a blank
    between each pair of equal neighbours."""
    return len(tokens) + sum(1 for a, b in zip(tokens, tokens[1:], strict=False) if a == b)


FILTER_REASONS = {
    "too_long": "longer than data.max_duration",
    "too_short": "too short for the model's frontend",
    "empty_text": "empty transcript after normalisation",
    "too_many_tokens": "more tokens than encoder frames (CTC cannot align them)",
}


def filter_records(
    records: Sequence[dict[str, Any]],
    tokenizer: Tokenizer,
    data_cfg: DataConfig,
    *,
    min_input_frames: int = 1,
    encoder_lengths: Callable[[torch.Tensor], torch.Tensor] | None = None,
    speed_perturb: Sequence[float] = (),
    what: str = "data",
) -> tuple[list[dict[str, Any]], Counter]:
    """Drop utterances the model cannot use; log and return the count per reason.

    Reasons: longer than ``data_cfg.max_duration``; fewer fbank frames than ``min_input_frames``;
    empty text after normalisation; more CTC-required frames (tokens plus repeats) than the
    encoder yields (``encoder_lengths`` maps fbank frame counts to encoder frame counts, e.g.
    ``model.encoder_lengths``). With ``speed_perturb`` factors the fastest version must fit.
    """
    sr = data_cfg.sample_rate
    fastest = max([1.0, *speed_perturb])
    frames = torch.tensor(
        [num_frames(int(r["duration"] * sr / fastest), sr) for r in records], dtype=torch.long
    )  # (N,) fbank frames of the fastest version
    enc = encoder_lengths(frames) if encoder_lengths is not None and len(records) else frames  # (N,)
    kept: list[dict[str, Any]] = []
    counts: Counter = Counter()
    for rec, n_frames, n_enc in zip(records, frames.tolist(), enc.tolist(), strict=True):
        text = normalize(rec["text"], data_cfg.normalizer)
        if rec["duration"] > data_cfg.max_duration:
            reason = "too_long"
        elif n_frames < min_input_frames:
            reason = "too_short"
        elif not text:
            reason = "empty_text"
        elif ctc_min_frames(tokenizer.encode(text)) > n_enc:
            reason = "too_many_tokens"
        else:
            kept.append(rec)
            continue
        counts[reason] += 1
        log.debug("%s: dropping %s (%s)", what, rec["id"], FILTER_REASONS[reason])
    if counts:
        detail = ", ".join(f"{n} {FILTER_REASONS[r]}" for r, n in counts.items())
        log.warning("%s: kept %d of %d utterances; dropped %s", what, len(kept), len(records), detail)
    else:
        log.info("%s: kept all %d utterances", what, len(records))
    return kept, counts


# ----------------------------------------------------------------------------------------------------- CMVN


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
                x = fbank_batch([wav], self.cfg.sample_rate, f)[0].to(torch.float64)  # (T, F)
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
    from ..model.cmvn import CMVNStats

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
