"""Audio of any length to text: cut at quiet points into windows, decode them in batches, join.

A file is never read whole: each window (at most ``window`` seconds, 30 by default) is read on
its own with a seek, and cut at the quietest point (smoothed frame energy) between
``min_window`` and ``window`` seconds from its start, so pieces join at pauses rather than
inside words and nothing overlaps. Windows are decoded ``batch_size`` at a time, so memory stays
bounded and time grows linearly with the length of the recording. Each window becomes a
:class:`Segment` with start and end times (for json/srt/vtt).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from asr.config import DecodeConfig
from asr.features.audio import audio_duration, load_audio, resample, speed_perturb
from asr.inference.recognizer import Recognizer

__all__ = [
    "Segment",
    "Transcript",
    "Transcriber",
    "transcribe",
    "find_cut",
    "to_srt",
    "to_vtt",
    "to_json",
    "FORMATS",
]

log = logging.getLogger(__name__)

FORMATS = ("text", "json", "srt", "vtt")
MIN_SAMPLES_S = 0.05  # shorter tails (less than two fbank frames of signal) are not decoded
_NO_TOKENS = torch.zeros(0, dtype=torch.long)  # transcription has no reference


@dataclass
class Segment:
    """One decoded window: times in seconds from the start of the recording."""

    start: float
    end: float
    text: str
    score: float = 0.0


@dataclass
class Transcript:
    """The text of one recording and its segments."""

    source: str
    text: str
    duration: float
    segments: list[Segment] = field(default_factory=list)


def find_cut(wav: torch.Tensor, sample_rate: int, lo: float, hi: float, smooth: float = 0.3) -> int:
    """Sample index of the quietest point of ``wav`` between ``lo`` and ``hi`` seconds.

    Energy is the mean square of 10 ms frames, averaged over ``smooth`` seconds, so the cut
    lands in a pause rather than in the silence of a stop consonant.
    """
    hop = max(1, sample_rate // 100)
    n = wav.numel() // hop
    energy = wav[: n * hop].view(n, hop).pow(2).mean(1)  # (frames,)
    k = max(1, int(smooth * 100)) | 1
    energy = F.avg_pool1d(energy.view(1, 1, -1), k, stride=1, padding=k // 2, count_include_pad=False).view(-1)
    a, b = int(lo * 100), min(int(hi * 100), n)
    if b <= a:
        return wav.numel()
    return (a + int(energy[a:b].argmin())) * hop + hop // 2


def _windows_of_array(
    wav: torch.Tensor, sr: int, window: float, min_window: float
) -> Iterator[tuple[float, float, torch.Tensor]]:
    start = 0
    total = wav.numel()
    while total - start >= MIN_SAMPLES_S * sr:
        piece = wav[start : start + int(window * sr)]
        cut = piece.numel() if start + piece.numel() >= total else find_cut(piece, sr, min_window, window)
        yield start / sr, (start + cut) / sr, piece[:cut]
        start += cut


def _windows_of_file(
    path: str, sr: int, window: float, min_window: float
) -> Iterator[tuple[float, float, torch.Tensor]]:
    """Windows of a file read piece by piece: (start s, end s, waveform at ``sr``)."""
    total = audio_duration(path)
    start = 0.0
    while total - start >= MIN_SAMPLES_S:
        end = min(start + window, total)
        piece = load_audio(path, sr, offset=start, end=end if end < total else None)
        if end < total:
            cut = find_cut(piece, sr, min_window, window)
            piece = piece[:cut]
        else:
            cut = piece.numel()
        yield start, start + cut / sr, piece
        start += cut / sr


class Transcriber:
    """A :class:`~asr.inference.Recognizer` with search settings; files or waveforms -> :class:`Transcript`."""

    def __init__(
        self,
        rec: Recognizer,
        decode: DecodeConfig | None = None,
        window: float = 30.0,
        min_window: float | None = None,
        batch_size: int = 8,
    ):
        if window <= 1.0:
            raise ValueError(f"window: expected more than 1 second, got {window}")
        if rec.tokenizer is None:
            raise ValueError("the model has no tokenizer: load it from a model directory with tokenizer.model")
        pad_to = rec.config.data.pad_to
        if pad_to and window > pad_to:
            raise ValueError(f"window: {window} s, but the model reads windows of at most {pad_to} s (data.pad_to)")
        self.rec = rec
        self.decode = decode or rec.config.decode
        self.decode.validate()
        self.sample_rate = rec.config.data.sample_rate
        self.window = window
        self.min_window = window / 3 if min_window is None else min_window
        self.batch_size = batch_size

    def _decode(self, wavs: list[torch.Tensor]) -> list[tuple[str, float]]:
        """(text, score) of each window; windows too short for the model decode to ("", 0.0)."""
        from asr.data.dataset import collate

        out = [("", 0.0)] * len(wavs)
        ok = [i for i, w in enumerate(wavs) if w.numel() >= int(MIN_SAMPLES_S * self.sample_rate)]
        views = []
        for speed in self.decode.speeds or [self.decode.speed]:  # played faster (or slower) before the features
            feats = self.rec.features([speed_perturb(wavs[i], self.sample_rate, speed) for i in ok]) if ok else []
            items = [
                {"id": str(i), "feats": f, "tokens": _NO_TOKENS, "duration": wavs[i].numel() / self.sample_rate}
                for i, f in zip(ok, feats, strict=True)
                if f.shape[0] >= self.rec.model.min_input_frames
            ]
            if items:
                batch = collate(items)  # the padding of every other batch the model sees
                views.append((batch.ids, batch.feats, batch.feat_lens))
        if len(views) == 1 and not self.decode.speeds:
            ids, feats, lens = views[0]
            hyps = dict(zip(ids, self.rec.recognize(feats, lens, self.decode), strict=True))
        else:
            hyps = self.rec.recognize_views(views, self.decode) if views else {}
        for uid, h in hyps.items():
            out[int(uid)] = (self.rec.text(h.tokens), h.score)
        return out

    def _run(self, source: str, windows: Iterator[tuple[float, float, torch.Tensor]], duration: float) -> Transcript:
        segments: list[Segment] = []
        pending: list[tuple[float, float, torch.Tensor]] = []

        def flush() -> None:
            for (s, e, _), (text, score) in zip(pending, self._decode([w for _, _, w in pending]), strict=True):
                segments.append(Segment(round(s, 3), round(e, 3), text, score))
            pending.clear()

        for win in windows:
            pending.append(win)
            if len(pending) >= self.batch_size:
                flush()
        flush()
        text = " ".join(s.text for s in segments if s.text)
        return Transcript(source, text, round(duration, 3), segments)

    def transcribe_file(self, path: str | os.PathLike) -> Transcript:
        """Transcribe one file of any length; raises ``AudioError`` naming the file if unreadable."""
        p = str(path)
        duration = audio_duration(p)
        return self._run(p, _windows_of_file(p, self.sample_rate, self.window, self.min_window), duration)

    def transcribe_waveform(self, wav: torch.Tensor, sample_rate: int, name: str = "<waveform>") -> Transcript:
        """Transcribe a 1-D waveform (or (channels, samples), averaged) at ``sample_rate``."""
        wav = torch.as_tensor(wav, dtype=torch.float32)
        if wav.dim() == 2:
            wav = wav.mean(0)
        if wav.dim() != 1:
            raise ValueError(f"{name}: expected a 1-D waveform, got shape {tuple(wav.shape)}")
        wav = resample(wav, sample_rate, self.sample_rate)
        windows = _windows_of_array(wav, self.sample_rate, self.window, self.min_window)
        return self._run(name, windows, wav.numel() / self.sample_rate)


def transcribe(
    model_or_dir,
    audio: str | os.PathLike | torch.Tensor | Sequence[str | os.PathLike | torch.Tensor],
    *,
    sample_rate: int = 16000,
    beam_size: int | None = None,
    mode: str | None = None,
    ctc_weight: float | None = None,
    device: str | torch.device | None = None,
    window: float = 30.0,
) -> str | list[str]:
    """Text of one input (a path or a waveform tensor at ``sample_rate``) or a list of texts.

    ``model_or_dir``: a :class:`~asr.inference.recognizer.Recognizer` from ``asr.load_model`` or a model
    directory. Search settings default to the model's ``decode`` config section.
    """
    if isinstance(model_or_dir, str | os.PathLike):
        from asr.inference import load_model

        rec = load_model(model_or_dir, device or "cpu")
    else:
        rec = model_or_dir if device is None else model_or_dir.to(device)
    decode = rec.config.decode.updated(beam_size=beam_size, mode=mode, ctc_weight=ctc_weight)
    tr = Transcriber(rec, decode, window=window)
    single = isinstance(audio, str | os.PathLike | torch.Tensor)
    items = [audio] if single else list(audio)
    texts = []
    for item in items:
        if isinstance(item, torch.Tensor):
            texts.append(tr.transcribe_waveform(item, sample_rate).text)
        else:
            texts.append(tr.transcribe_file(item).text)
    return texts[0] if single else texts


def _timestamp(t: float, sep: str) -> str:
    ms = int(round(t * 1000))
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, ms = divmod(rem, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def to_srt(t: Transcript) -> str:
    """SubRip: numbered cues with ``HH:MM:SS,mmm`` times; empty segments are left out."""
    cues = [s for s in t.segments if s.text]
    return "".join(
        f"{i}\n{_timestamp(s.start, ',')} --> {_timestamp(s.end, ',')}\n{s.text}\n\n" for i, s in enumerate(cues, 1)
    )


def to_vtt(t: Transcript) -> str:
    """WebVTT: ``WEBVTT`` header and cues with ``HH:MM:SS.mmm`` times."""
    cues = [s for s in t.segments if s.text]
    return "WEBVTT\n\n" + "".join(
        f"{_timestamp(s.start, '.')} --> {_timestamp(s.end, '.')}\n{s.text}\n\n" for s in cues
    )


def to_json(t: Transcript) -> str:
    """One JSON object: file, text, duration and segments (start, end, text, score)."""
    return json.dumps(
        {
            "file": t.source,
            "text": t.text,
            "duration": t.duration,
            "segments": [asdict(s) for s in t.segments],
        },
        ensure_ascii=False,
    )
