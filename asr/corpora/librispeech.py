"""LibriSpeech (OpenSLR resource 12): download, verify, extract, and write one manifest per subset.

The corpus folder may hold the subsets directly (``DIR/dev-clean``) or, as the archives unpack,
under ``DIR/LibriSpeech/dev-clean``. Each subset is ``<speaker>/<chapter>/<utt>.flac`` plus one
``<speaker>-<chapter>.trans.txt`` per chapter with lines ``<utt> <TRANSCRIPT>``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from asr.corpora.download import download, extract
from asr.data.manifest import report_unmatched, write_manifest
from asr.features.audio import duration_or_problem as _duration

__all__ = [
    "SUBSETS",
    "OPENSLR_URL",
    "PrepareError",
    "SubsetReport",
    "find_subset",
    "download_librispeech",
    "prepare_librispeech",
    "read_subset",
]

log = logging.getLogger(__name__)

OPENSLR_URL = "https://www.openslr.org/resources/12/"

# MD5 of each archive as published in https://www.openslr.org/resources/12/md5sum.txt
SUBSETS: dict[str, str] = {
    "dev-clean": "42e2234ba48799c1f50f24a7926300a1",
    "dev-other": "c8d0bcc9cca99d4f8b62fcc847357931",
    "test-clean": "32fa31d27d2e1cad72775fee3f4849a9",
    "test-other": "fb5a50374b501bb3bac4815ee91d3135",
    "train-clean-100": "2a93770f6d5c6c964bc36631d331a522",
    "train-clean-360": "c0e676e450a7ff2f54aeade5171606fa",
    "train-other-500": "d1a0fd59409feb2c614ce4d30c387708",
}


# The LibriSpeech LM corpus (OpenSLR 11): 40 M normalised sentences from 14.5 k books (the dev/test books
# excluded), 1.5 GB gzip. OpenSLR 11 publishes no checksum file; this MD5 is a download's as recorded by
# others (not verified here: no network) and is overridable (``md5=``, ``asr download librispeech-lm --md5``).
OPENSLR_LM_URL = "https://www.openslr.org/resources/11/"
LM_TEXT = "librispeech-lm-norm.txt.gz"
LM_TEXT_MD5 = "c83c64c726a1aedfe65f80aa311de402"


def download_librispeech_lm(corpus_dir: str | os.PathLike, mirror: str = OPENSLR_LM_URL, *, md5: str | None = None,
                            progress: bool = True, retries: int = 5) -> Path:  # fmt: skip
    """Fetch ``librispeech-lm-norm.txt.gz`` into ``corpus_dir`` (resumable, MD5-checked like the audio);
    a file already there with the right MD5 is not fetched again. It stays gzipped: ``asr lm train``
    streams it."""
    url = mirror.rstrip("/") + f"/{LM_TEXT}"
    return download(url, Path(corpus_dir) / LM_TEXT, md5 or LM_TEXT_MD5, progress=progress, retries=retries)


class PrepareError(ValueError):
    """A corpus that cannot be turned into a manifest as asked; the message names the files."""


@dataclass
class SubsetReport:
    """What ``read_subset`` found: utterances kept and problems, each listed by name."""

    subset: str
    records: list[dict] = field(default_factory=list)
    audio_without_text: list[str] = field(default_factory=list)  # file paths
    text_without_audio: list[str] = field(default_factory=list)  # utterance ids
    unreadable: list[str] = field(default_factory=list)  # "path: problem"

    @property
    def hours(self) -> float:
        return sum(r["duration"] for r in self.records) / 3600

    @property
    def problems(self) -> int:
        return len(self.audio_without_text) + len(self.text_without_audio) + len(self.unreadable)


def _check_subsets(subsets: Iterable[str]) -> list[str]:
    subsets = list(subsets)
    unknown = [s for s in subsets if s not in SUBSETS]
    if unknown:
        raise PrepareError(f"unknown LibriSpeech subset(s) {unknown}: expected some of {', '.join(SUBSETS)}")
    return subsets


def find_subset(corpus_dir: str | os.PathLike, subset: str) -> Path | None:
    """The folder of ``subset`` under ``corpus_dir`` (directly or under ``LibriSpeech/``), or None."""
    root = Path(corpus_dir)
    for cand in (root / subset, root / "LibriSpeech" / subset):
        if cand.is_dir():
            return cand
    return None


def download_librispeech(
    corpus_dir: str | os.PathLike,
    subsets: Sequence[str],
    mirror: str = OPENSLR_URL,
    *,
    md5: dict[str, str] | None = None,
    keep_archives: bool = False,
    progress: bool = True,
    retries: int = 5,
) -> list[Path]:
    """Fetch, verify and extract each subset not yet present into ``corpus_dir/LibriSpeech/<subset>``.

    ``md5`` overrides the published checksums (tests serve their own archives). Archives are
    deleted after a successful extraction unless ``keep_archives``.
    """
    subsets = _check_subsets(subsets)
    root = Path(corpus_dir)
    sums = {**SUBSETS, **(md5 or {})}
    done = []
    for subset in subsets:
        found = find_subset(root, subset)
        if found is not None:
            log.info("%s: already present at %s, not downloading", subset, found)
            done.append(found)
            continue
        url = mirror.rstrip("/") + f"/{subset}.tar.gz"
        archive = download(url, root / f"{subset}.tar.gz", sums[subset], progress=progress, retries=retries)
        dest = extract(archive, root / "LibriSpeech" / subset, select=lambda tmp, s=subset: tmp / "LibriSpeech" / s)
        if not keep_archives:
            archive.unlink()
        log.info("%s: extracted to %s", subset, dest)
        done.append(dest)
    return done


def read_subset(subset_dir: str | os.PathLike, num_workers: int = 8, progress: bool = True) -> SubsetReport:
    """Pair transcripts with audio files in one subset folder; durations come from the headers."""
    subset_dir = Path(subset_dir)
    report = SubsetReport(subset_dir.name)
    texts: dict[str, tuple[str, str]] = {}  # utt id -> (text, speaker)
    for trans in sorted(subset_dir.glob("*/*/*.trans.txt")):
        for lineno, line in enumerate(trans.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            utt, _, text = line.strip().partition(" ")
            if utt in texts:
                raise PrepareError(f"{trans}:{lineno}: utterance {utt} appears twice")
            texts[utt] = (text.strip(), utt.split("-")[0])
    audio = {p.stem: p for p in sorted(subset_dir.glob("*/*/*.flac"))}
    report.text_without_audio = sorted(set(texts) - set(audio))
    report.audio_without_text = sorted(str(audio[u]) for u in set(audio) - set(texts))
    utts = sorted(set(texts) & set(audio))
    with ThreadPoolExecutor(max(1, num_workers)) as pool:
        durations = list(
            tqdm(
                pool.map(_duration, (audio[u] for u in utts)),
                total=len(utts), desc=f"{subset_dir.name} durations", unit="file", disable=not progress,
            )
        )
    for utt, dur in zip(utts, durations, strict=True):
        if isinstance(dur, str):
            report.unreadable.append(f"{audio[utt]}: {dur}")
            continue
        text, speaker = texts[utt]
        path = str(audio[utt].absolute())
        report.records.append({"id": utt, "audio": path, "duration": round(dur, 4), "text": text, "speaker": speaker})
    return report


def prepare_librispeech(
    corpus_dir: str | os.PathLike,
    subsets: Sequence[str],
    out_dir: str | os.PathLike,
    *,
    strict: bool = False,
    num_workers: int = 8,
    progress: bool = True,
) -> dict[str, SubsetReport]:
    """Write ``out_dir/<subset>.jsonl`` for each subset found under ``corpus_dir``.

    Audio without a transcript line, transcript lines without audio and unreadable files are
    logged by name and counted in the returned reports; with ``strict`` any of them is an error
    (and no manifest of that subset is written).
    """
    subsets = _check_subsets(subsets)
    reports = {}
    for subset in subsets:
        d = find_subset(corpus_dir, subset)
        if d is None:
            raise PrepareError(
                f"{subset}: not found under {corpus_dir} (looked for {subset}/ and LibriSpeech/{subset}/); "
                "add --download to fetch it"
            )
        rep = read_subset(d, num_workers=num_workers, progress=progress)
        report_unmatched(f"{subset} ({d})", rep, strict, PrepareError)
        if not rep.records:
            raise PrepareError(f"{subset} ({d}): no utterances with both audio and transcript")
        write_manifest(Path(out_dir) / f"{subset}.jsonl", rep.records)
        reports[subset] = rep
    return reports
