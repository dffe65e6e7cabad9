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

Where the recordings come from: five speakers' 2,500 clips ship with the repository as lossless
FLAC (``corpora/fsdd``, with FSDD's licence and a ``SHA256SUMS``), so the recipe needs no network;
``download_fsdd`` fetches a pinned upstream commit instead of a moving branch and checks every
recording of those speakers against the SHA-256 of the original WAV bytes before extracting any.
A recordings folder with a ``SHA256SUMS`` beside it is checked by ``verify_fsdd``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import re
import shutil
import zipfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
import soundfile as sf
import torch
from tqdm import tqdm

from ..atomic import atomic_write_text
from ..audio import load_audio, resample
from .download import ChecksumError, FetchError, download, extract, read_sha256sums, verify_sha256sums
from .librispeech import PrepareError
from .manifest import write_manifest

__all__ = [
    "BUNDLED_FSDD", "DIGIT_WORDS", "FSDD_COMMIT", "FSDD_URL", "FsddOptions", "find_recordings", "fsdd_speakers",
    "download_fsdd", "verify_fsdd", "prepare_fsdd",
]  # fmt: skip

log = logging.getLogger(__name__)

# The commit that added lucas, the last of the bundled speakers: its tree has their recordings and
# theo's (six speakers, as its metadata.py lists). A commit, not a branch: the archive cannot change.
FSDD_COMMIT = "d6938f9bf1545aa66d8489fc9f1385a7abd64282"
FSDD_URL = f"https://github.com/Jakobovski/free-spoken-digit-dataset/archive/{FSDD_COMMIT}.zip"
# The recordings that ship with the repository (absent from an installed copy of the package alone).
BUNDLED_FSDD = Path(__file__).resolve().parents[2] / "corpora" / "fsdd"
UPSTREAM_SUMS = BUNDLED_FSDD / "upstream-wav.sha256"  # SHA-256 of the original WAV bytes
SUMS = "SHA256SUMS"
DIGIT_WORDS = ("ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE")
_NAME = re.compile(r"^(\d)_([A-Za-z0-9]+)_(\d+)\.(wav|flac)$")
SOURCE_RATE = 8000
OFFLINE_HINT = (
    "No internet access is needed for FSDD: without --download the recipe uses the recordings bundled "
    f"in {BUNDLED_FSDD}; or give a folder of FSDD recordings of your own with --corpus-dir DIR."
)


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

    def validate(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"digits per utterance: need 1 <= min <= max, got {self.min_digits}..{self.max_digits}")
        if not 0 <= self.min_gap <= self.max_gap or not 0 <= self.min_edge <= self.max_edge:
            raise ValueError("gap and edge lengths: need 0 <= min <= max")
        if not 0.0 <= self.trim_prob <= 1.0:
            raise ValueError(f"trim_prob: expected a share in [0, 1], got {self.trim_prob}")
        if not self.trim_db[0] <= self.trim_db[1] <= 0.0:
            raise ValueError(f"trim_db: expected LOW <= HIGH <= 0 (dB below the loudest frame), got {self.trim_db}")
        for k in ("num_train", "num_dev", "num_test"):
            if getattr(self, k) < 0:
                raise ValueError(f"{k}: expected an integer >= 0, got {getattr(self, k)}")


def find_recordings(corpus_dir: str | os.PathLike) -> Path:
    """The folder of FSDD clips (wav or flac): ``DIR/recordings``, ``DIR/*/recordings`` or ``DIR`` itself."""
    root = Path(corpus_dir)
    candidates = [root / "recordings", *sorted(root.glob("*/recordings")), root]
    for c in candidates:
        if c.is_dir() and any(_NAME.match(p.name) for p in c.iterdir()):
            return c
    raise PrepareError(
        f"{root}: no FSDD recordings ({{digit}}_{{speaker}}_{{take}}.wav or .flac) in it or in recordings/ below "
        f"it; add --download to fetch FSDD's pinned archive into it, or leave --corpus-dir out to use the "
        f"recordings bundled in {BUNDLED_FSDD}"
    )


def verify_fsdd(corpus_dir: str | os.PathLike) -> tuple[Path, int | None]:
    """The recordings folder of ``corpus_dir`` and how many files its ``SHA256SUMS`` vouches for.

    The list is looked for beside the recordings folder and inside it; every file it names must
    match, and every FSDD-named file in the folder must be in it (else it would be used
    unchecked): :class:`ChecksumError` names the files that do not. ``None``: no list, nothing checked.
    """
    rec = find_recordings(corpus_dir)
    for sums in (rec.parent / SUMS, rec / SUMS):
        if sums.is_file():
            rel = rec.relative_to(sums.parent).as_posix()
            pattern = "*_*_*.*" if rel == "." else f"{rel}/*_*_*.*"
            try:
                return rec, verify_sha256sums(sums, unlisted=pattern)
            except ChecksumError as e:
                if sums.parent.resolve() != BUNDLED_FSDD:
                    raise
                raise ChecksumError(f"{e}\n(`git checkout -- corpora/fsdd` restores the repository's copy)") from e
    log.info("%s: no %s beside the recordings, so they are not checked", rec, SUMS)
    return rec, None


def _check_archive(archive: Path, expected: dict[str, str]) -> dict[str, str]:
    """{member name: sha256} of the recordings in ``archive`` that ``expected`` ({file name: sha256}) lists.

    Every listed recording must be in the archive with exactly those bytes (checked in memory,
    before anything is written); otherwise :class:`ChecksumError` names them. Recordings of
    other speakers are counted and left out."""
    found: dict[str, str] = {}
    problems, others = [], set()
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                p = PurePosixPath(info.filename)
                if p.parent.name != "recordings" or not _NAME.match(p.name):
                    continue
                if p.name not in expected:
                    others.add(p.name)
                    continue
                got = hashlib.sha256(zf.read(info)).hexdigest()
                if got != expected[p.name]:
                    problems.append(f"{info.filename}: SHA-256 {got}, expected {expected[p.name]}")
                found[info.filename] = got
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as e:
        raise ChecksumError(f"{archive}: not a readable zip archive ({e}); nothing was extracted") from e
    present = {PurePosixPath(m).name for m in found}
    problems += [f"{name}: missing from the archive" for name in sorted(set(expected) - present)]
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ChecksumError(
            f"{archive}: {len(problems)} recording(s) changed or missing against {UPSTREAM_SUMS.name}; nothing "
            "was extracted and the archive was deleted:\n  " + "\n  ".join(problems[:10]) + more
        )
    if others:
        speakers = sorted({_NAME.match(n).group(2) for n in others})
        log.info("%s: %d recording(s) of speaker(s) without checksums (%s) left out", archive, len(others),
                 ", ".join(speakers))
    return found


def download_fsdd(
    corpus_dir: str | os.PathLike,
    url: str = FSDD_URL,
    sha256: str | None = None,
    *,
    upstream_sums: str | os.PathLike = UPSTREAM_SUMS,
    progress: bool = True,
    retries: int = 2,
    retry_wait: float = 2.0,
) -> Path:
    """Fetch FSDD's pinned archive into ``corpus_dir/free-spoken-digit-dataset/recordings`` unless present.

    Before anything is extracted, every recording listed in ``upstream_sums`` (the bundled
    speakers' original WAVs) is checked in the archive; any difference is a
    :class:`ChecksumError` naming the files, and the archive is deleted. Only those recordings
    are extracted (other speakers' have no checksum; their count is logged), with a
    ``SHA256SUMS`` that :func:`verify_fsdd` checks on later runs. ``sha256`` checks the whole
    archive too, when known. A server out of reach is a :class:`FetchError` that says what to
    do offline.
    """
    root = Path(corpus_dir)
    try:
        found = find_recordings(root)
        log.info("FSDD already present at %s, not downloading", found)
        return found
    except PrepareError:
        pass
    if not Path(upstream_sums).is_file():  # e.g. a package installed without its repository
        raise ChecksumError(f"{upstream_sums}: missing; without FSDD's checksums nothing can be checked, "
                            "so nothing is downloaded (a clone of the repository has it in corpora/fsdd)")
    expected = {PurePosixPath(k).name: v for k, v in read_sha256sums(upstream_sums).items()}
    archive = root / f"free-spoken-digit-dataset-{url.rstrip('/').rsplit('/', 1)[-1]}"
    try:
        download(url, archive, sha256=sha256, progress=progress, retries=retries, retry_wait=retry_wait)
    except FetchError as e:
        raise FetchError(f"{e}\n{OFFLINE_HINT}") from e
    try:
        members = _check_archive(archive, expected)
    except ChecksumError:
        archive.unlink(missing_ok=True)
        raise

    def top(tmp: Path) -> Path:  # the folder holding recordings/ (GitHub's is <repo>-<commit>/)
        return min(tmp.rglob("recordings"), key=lambda p: len(p.parts)).parent

    def write_sums(folder: Path) -> None:
        lines = sorted(f"{h}  recordings/{PurePosixPath(m).name}\n" for m, h in members.items())
        atomic_write_text(folder / SUMS, "".join(lines))

    extract(archive, root / "free-spoken-digit-dataset", select=top, members=members.__contains__,
            prepare=write_sums)
    archive.unlink()
    log.info("FSDD: %d recordings of %s checked and extracted", len(members), url)
    return find_recordings(root)


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
        m = _NAME.match(p.name)
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
    out_dir: Path, clips: _Clips, progress: bool,
) -> list[dict]:
    """Render ``n`` connected-digit utterances from ``pool`` (speaker -> [(digit, path)]) into ``out_dir``."""
    rng = random.Random(f"fsdd-{opts.seed}-{split}")  # string seeds are stable across runs and platforms
    trim_rng = random.Random(f"fsdd-{opts.seed}-{split}-trim")  # its own stream: the rest stays as it was
    speakers = sorted(s for s, takes in pool.items() if takes)
    by_digit = {s: defaultdict(list) for s in speakers}
    for s in speakers:
        for digit, path in pool[s]:
            by_digit[s][digit].append(path)
    records = []
    for i in tqdm(range(n), desc=f"fsdd {split}", unit="utt", disable=not progress):
        spk = rng.choice(speakers)
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
) -> dict[str, int]:
    """Write isolated-digit manifests (``digits_{train,dev,test}.jsonl``) and connected-digit
    utterances (``wav/<split>/*.wav`` + ``{train,dev,test}.jsonl``) under ``out_dir``.

    Returns the number of utterances in each manifest. ``test_speakers`` defaults to the last
    speaker in sorted order; ``dev_speakers`` to none (dev is then the train speakers' takes 0-4).
    """
    opts = options or FsddOptions()
    opts.validate()
    rec_dir = find_recordings(corpus_dir)
    by_speaker = _scan(rec_dir)
    speakers = sorted(by_speaker)
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
        records = _build(split, n, pool, opts, split == "train", tmp, clips, progress)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for r in records:
            r["audio"] = str(final / Path(r["audio"]).name)
        counts[split] = write_manifest(out / f"{split}.jsonl", records)
    return counts
