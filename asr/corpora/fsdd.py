"""Free Spoken Digit Dataset: isolated digits and synthesised connected-digit utterances.

FSDD clips are ``{digit}_{speaker}_{take}.wav`` or ``.flac`` (8 kHz mono, trimmed). Speakers are
discovered from the file names. Splits are speaker-disjoint for testing: the test speakers (all
takes) are never heard in training; the remaining speakers train on takes 5-49, and their takes
0-4 (FSDD's own test convention) plus any ``dev_speakers`` (all takes) form the dev set.

A connected-digit utterance joins 1-7 takes of ONE speaker with 50-400 ms gaps, over a faint
noise floor (30-50 dB below the speech), with 50-250 ms of the same noise before and after. It is
built at 8 kHz, resampled to 16 kHz and written as a 16-bit wav. Training utterances can get a
random gain per take and per utterance (real speakers record at very different levels), and
half of their takes lose their weak edges at a random energy threshold (FSDD's own trimming took
the onset /s/ of a quiet speaker's SIX; see ``_trim_weak_edges``). Everything is a pure function
of the seed.

Where the recordings come from, how they are checked and fetched: ``asr.corpora.fsdd_corpus``.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from tqdm import tqdm

from asr.corpora.fsdd_corpus import (
    BUNDLED_FSDD,
    CLIP_NAME,
    FSDD_COMMIT,
    FSDD_URL,
    download_fsdd,
    find_recordings,
    verify_fsdd,
)
from asr.corpora.librispeech import PrepareError
from asr.data.manifest import write_manifest
from asr.features.audio import load_audio, resample

__all__ = [
    "BUNDLED_FSDD", "DIGIT_WORDS", "FSDD_COMMIT", "FSDD_URL", "FsddOptions", "find_recordings", "fsdd_speakers",
    "download_fsdd", "verify_fsdd", "prepare_fsdd",
]  # fmt: skip

log = logging.getLogger(__name__)

DIGIT_WORDS = ("ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE")
SOURCE_RATE = 8000
@dataclass
class FsddOptions:
    """How connected-digit utterances are built (defaults are the documented ones)."""

    seed: int = 0
    sample_rate: int = 16000
    num_train: int = 2000
    num_dev: int = 200
    num_test: int = 300
    min_digits: int = 1
    max_digits: int = 7
    min_gap: float = 0.05  # seconds between takes
    max_gap: float = 0.40
    min_edge: float = 0.05  # seconds of noise before the first and after the last take
    max_edge: float = 0.25
    snr_db: tuple[float, float] = (30.0, 50.0)  # noise floor below the speech RMS
    train_gain_db: tuple[float, float] = (-18.0, 6.0)  # per training utterance; (0, 0) disables
    take_gain_db: float = 3.0  # +- per take in training utterances; 0 disables
    train_takes: tuple[int, int] = (5, 49)  # inclusive; the other takes of train speakers go to dev
    trim_prob: float = 0.5  # share of training takes whose weak edges are cut (0 disables), see _trim_weak_edges
    trim_db: tuple[float, float] = (-25.0, -10.0)  # the cut's threshold below the take's loudest 10 ms, drawn per take
    tts_share: float = 0.0  # share of training utterances spoken by a synthetic voice (prepare_fsdd's tts_dir)

    def validate(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"digits per utterance: need 1 <= min <= max, got {self.min_digits}..{self.max_digits}")
        if not 0 <= self.min_gap <= self.max_gap or not 0 <= self.min_edge <= self.max_edge:
            raise ValueError("gap and edge lengths: need 0 <= min <= max")
        if not 0.0 <= self.trim_prob <= 1.0:
            raise ValueError(f"trim_prob: expected a share in [0, 1], got {self.trim_prob}")
        if not 0.0 <= self.tts_share < 1.0:
            raise ValueError(f"tts_share: expected a share in [0, 1), got {self.tts_share}")
        if not self.trim_db[0] <= self.trim_db[1] <= 0.0:
            raise ValueError(f"trim_db: expected LOW <= HIGH <= 0 (dB below the loudest frame), got {self.trim_db}")
        for k in ("num_train", "num_dev", "num_test"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k}: expected an integer >= 0, got {getattr(self, k)}")


def check_options(opts: FsddOptions, tts_dir: str | os.PathLike | None = None) -> None:
    """``prepare_fsdd``'s checks of its options, for callers to run before any costly work."""
    opts.validate()
    if (tts_dir is None) != (opts.tts_share == 0):
        raise PrepareError("synthetic voices need both a folder of them (tts_dir, --tts-dir) and a share of the "
                           f"training utterances > 0 (tts_share, --tts-share; got {opts.tts_share})")


def fsdd_speakers(corpus_dir: str | os.PathLike) -> list[str]:
    """The speakers whose recordings ``corpus_dir`` holds, sorted (from the file names)."""
    return list(_scan(find_recordings(corpus_dir)))


def _scan(rec_dir: Path) -> dict[str, list[tuple[int, int, Path]]]:
    """speaker -> sorted [(digit, take, path)]; audio files with other names are logged and skipped.

    A take present both as .wav and as .flac is an error: which one is meant is not for us to guess."""
    by_speaker: dict[str, list[tuple[int, int, Path]]] = defaultdict(list)
    other = []
    seen: dict[str, Path] = {}
    for p in sorted(rec_dir.iterdir()):
        if p.suffix.lower() not in (".wav", ".flac"):
            continue
        m = CLIP_NAME.match(p.name)
        if not m:
            other.append(p.name)
            continue
        if p.stem in seen:
            raise PrepareError(f"{rec_dir}: {seen[p.stem].name} and {p.name} are the same take; keep one of them")
        seen[p.stem] = p
        by_speaker[m.group(2)].append((int(m.group(1)), int(m.group(3)), p))
    if other:
        log.warning("%s: %d audio file(s) not named {digit}_{speaker}_{take}.wav/.flac skipped, e.g. %s",
                    rec_dir, len(other), other[0])
    return {s: sorted(v) for s, v in sorted(by_speaker.items())}


def _split_speakers(
    speakers: list[str], dev_speakers: Sequence[str] | None, test_speakers: Sequence[str] | None
) -> tuple[list[str], list[str], list[str]]:
    dev = list(dev_speakers or [])
    # Default: hold out the last speaker in sorted order (the same choice for the 5- and 6-speaker sets).
    test = list(test_speakers) if test_speakers is not None else speakers[-1:]
    for name, group in (("--dev-speakers", dev), ("--test-speakers", test)):
        unknown = [s for s in group if s not in speakers]
        if unknown:
            raise PrepareError(f"{name}: unknown speaker(s) {unknown}; the recordings have {', '.join(speakers)}")
    both = set(dev) & set(test)
    if both:
        raise PrepareError(f"speaker(s) {sorted(both)} are in both --dev-speakers and --test-speakers")
    train = [s for s in speakers if s not in dev and s not in test]
    if not train:
        raise PrepareError(f"no training speaker left: {', '.join(speakers)} are all dev or test speakers")
    return train, dev, test


def _isolated(takes: list[tuple[str, int, int, Path]]) -> list[dict]:
    return [
        {
            "id": f"{spk}-{digit}-{take}",
            "audio": str(path.absolute()),
            "duration": round(sf.info(str(path)).duration, 4),
            "text": DIGIT_WORDS[digit],
            "speaker": spk,
        }
        for spk, digit, take, path in takes
    ]


class _Clips:
    """8 kHz takes loaded once, as float32 numpy arrays."""

    def __init__(self) -> None:
        self.cache: dict[Path, np.ndarray] = {}

    def __call__(self, path: Path) -> np.ndarray:
        if path not in self.cache:
            self.cache[path] = load_audio(path, sample_rate=SOURCE_RATE).numpy()
        return self.cache[path]


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def _trim_weak_edges(x: np.ndarray, rel_db: float, frame: int = SOURCE_RATE // 100) -> np.ndarray:
    """Cut the leading and trailing 10 ms frames more than ``-rel_db`` dB below the loudest frame.

    FSDD's clips were trimmed by energy, so a quiet speaker's weak onsets and codas (the /s/ of SIX,
    the /t/ of TWO) may be gone: training takes get the same treatment at random thresholds."""
    n = x.size // frame
    if n < 3:
        return x
    energy = np.square(x[: n * frame].reshape(n, frame), dtype=np.float64).mean(1)
    loud = np.flatnonzero(energy >= energy.max() * 10 ** (rel_db / 10))
    return x[loud[0] * frame : (loud[-1] + 1) * frame]


def _build(
    split: str, n: int, pool: dict[str, list[tuple[int, Path]]], opts: FsddOptions, augment: bool,
    out_dir: Path, clips: _Clips, progress: bool, synthetic: dict[str, list[tuple[int, Path]]] | None = None,
) -> list[dict]:
    """Render ``n`` connected-digit utterances from ``pool`` (speaker -> [(digit, path)]) into ``out_dir``;
    a share ``opts.tts_share`` of them from the ``synthetic`` speakers' takes instead."""
    rng = random.Random(f"fsdd-{opts.seed}-{split}")  # string seeds are stable across runs and platforms
    trim_rng = random.Random(f"fsdd-{opts.seed}-{split}-trim")  # its own stream: the rest stays as it was
    tts_rng = random.Random(f"fsdd-{opts.seed}-{split}-tts")
    synthetic = synthetic or {}
    speakers = sorted(s for s, takes in pool.items() if takes)
    voices = sorted(s for s, takes in synthetic.items() if takes)
    by_digit = {s: defaultdict(list) for s in speakers + voices}
    for s, takes in {**pool, **synthetic}.items():
        for digit, path in takes:
            by_digit[s][digit].append(path)
    records = []
    for i in tqdm(range(n), desc=f"fsdd {split}", unit="utt", disable=not progress):
        spk = rng.choice(speakers)
        if voices and tts_rng.random() < opts.tts_share:
            spk = tts_rng.choice(voices)
        digits_here = sorted(by_digit[spk])
        k = rng.randint(opts.min_digits, opts.max_digits)
        digits = [rng.choice(digits_here) for _ in range(k)]
        paths = [rng.choice(by_digit[spk][d]) for d in digits]
        gaps = [rng.uniform(opts.min_gap, opts.max_gap) for _ in range(k - 1)]
        edges = (rng.uniform(opts.min_edge, opts.max_edge), rng.uniform(opts.min_edge, opts.max_edge))
        take_gains = [rng.uniform(-opts.take_gain_db, opts.take_gain_db) if augment else 0.0 for _ in range(k)]
        utt_gain = rng.uniform(*opts.train_gain_db) if augment else 0.0
        snr = rng.uniform(*opts.snr_db)
        noise_seed = rng.getrandbits(63)

        pieces = [np.zeros(int(edges[0] * SOURCE_RATE), np.float32)]
        for j, (path, g) in enumerate(zip(paths, take_gains, strict=True)):
            clip = clips(path)
            if augment and trim_rng.random() < opts.trim_prob:
                clip = _trim_weak_edges(clip, trim_rng.uniform(*opts.trim_db))
            pieces.append(clip * np.float32(10 ** (g / 20)))
            pieces.append(np.zeros(int((gaps[j] if j < k - 1 else edges[1]) * SOURCE_RATE), np.float32))
        speech = np.concatenate(pieces)  # (N,) at 8 kHz
        level = _rms(np.concatenate(pieces[1::2]))
        noise = np.random.default_rng(noise_seed).standard_normal(speech.size).astype(np.float32)
        wav = speech + noise * np.float32(level * 10 ** (-snr / 20))
        wav *= np.float32(10 ** (utt_gain / 20))
        peak = float(np.abs(wav).max())
        if peak > 0.99:  # keep the gain change, avoid clipping
            wav *= np.float32(0.99 / peak)
        wav16 = resample(torch.from_numpy(wav), SOURCE_RATE, opts.sample_rate).clamp(-1, 1).numpy()
        uid = f"{spk}-{split}-{i:05d}"
        path = out_dir / f"{uid}.wav"
        sf.write(str(path), wav16, opts.sample_rate, subtype="PCM_16")
        records.append(
            {
                "id": uid,
                "audio": str(path.absolute()),
                "duration": round(wav16.size / opts.sample_rate, 4),
                "text": " ".join(DIGIT_WORDS[d] for d in digits),
                "speaker": spk,
                "takes": [p.stem for p in paths],  # the FSDD clips used, in order
            }
        )
    return records


def prepare_fsdd(
    corpus_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dev_speakers: Sequence[str] | None = None,
    test_speakers: Sequence[str] | None = None,
    options: FsddOptions | None = None,
    progress: bool = True,
    tts_dir: str | os.PathLike | None = None,
) -> dict[str, int]:
    """Write isolated-digit manifests (``digits_{train,dev,test}.jsonl``) and connected-digit
    utterances (``wav/<split>/*.wav`` + ``{train,dev,test}.jsonl``) under ``out_dir``.

    Returns the number of utterances in each manifest. ``test_speakers`` defaults to the last
    speaker in sorted order; ``dev_speakers`` to none (dev is then the train speakers' takes 0-4).
    ``tts_dir``: synthetic speakers' takes (``asr.corpora.fsdd_tts``), all of them for training only,
    speaking a share ``options.tts_share`` of the training utterances.
    """
    opts = options or FsddOptions()
    check_options(opts, tts_dir)
    rec_dir = find_recordings(corpus_dir)
    by_speaker = _scan(rec_dir)
    speakers = sorted(by_speaker)
    synthetic: dict[str, list[tuple[int, Path]]] = {}
    if tts_dir is not None:
        voices = _scan(find_recordings(tts_dir))
        clash = sorted(set(voices) & set(speakers))
        if clash:
            raise PrepareError(f"{tts_dir}: synthetic speaker(s) {clash} have the names of recorded ones")
        synthetic = {s: [(d, p) for d, _take, p in takes] for s, takes in voices.items()}
    train_spk, dev_spk, test_spk = _split_speakers(speakers, dev_speakers, test_speakers)
    lo, hi = opts.train_takes
    splits: dict[str, list[tuple[str, int, int, Path]]] = {"train": [], "dev": [], "test": []}
    for s in speakers:
        for digit, take, path in by_speaker[s]:
            if s in test_spk:
                splits["test"].append((s, digit, take, path))
            elif s in dev_spk or not lo <= take <= hi:
                splits["dev"].append((s, digit, take, path))
            else:
                splits["train"].append((s, digit, take, path))
    log.info("FSDD speakers: train %s, dev %s (+ takes outside %d-%d of train speakers), test %s",
             train_spk, dev_spk, lo, hi, test_spk)
    if synthetic:
        log.info("plus %d synthetic training speakers (%s), speaking %.0f%% of the training utterances",
                 len(synthetic), tts_dir, 100 * opts.tts_share)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    clips = _Clips()
    for split, n in (("train", opts.num_train), ("dev", opts.num_dev), ("test", opts.num_test)):
        takes = splits[split]
        if not takes:
            raise PrepareError(f"{split}: no recordings for this split (speakers {speakers})")
        counts[f"digits_{split}"] = write_manifest(out / f"digits_{split}.jsonl", _isolated(takes))
        pool: dict[str, list[tuple[int, Path]]] = defaultdict(list)
        for s, digit, _take, path in takes:
            pool[s].append((digit, path))
        final = out / "wav" / split
        tmp = out / "wav" / f".{split}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        records = _build(split, n, pool, opts, split == "train", tmp, clips, progress,
                         synthetic if split == "train" else None)  # fmt: skip
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for r in records:
            r["audio"] = str(final / Path(r["audio"]).name)
        counts[split] = write_manifest(out / f"{split}.jsonl", records)
    return counts
