"""Import a Kaldi / ESPnet data directory (``wav.scp``, ``text``, optional ``segments``, ``utt2spk``).

Only plain file paths in ``wav.scp`` are supported: a pipeline (``sox ... |``) or an ark offset
(``foo.ark:123``) is an error naming the line, since the dataset reads files directly. Relative
paths are taken relative to the current directory, as Kaldi does (run from the recipe folder).
"""

from __future__ import annotations

import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from asr.corpora.librispeech import PrepareError
from asr.data.manifest import report_unmatched, write_manifest
from asr.features.audio import duration_or_problem as _duration

__all__ = ["read_kaldi_dir", "prepare_kaldi", "KaldiReport"]

log = logging.getLogger(__name__)

_ARK_OFFSET = re.compile(r"\.ark:\d+$")


def _read_table(path: Path, min_fields: int, max_fields: int | None = None) -> dict[str, tuple[list[str], int]]:
    """``key rest...`` lines -> {key: (fields after the key, line number)}; duplicate keys are errors."""
    table: dict[str, tuple[list[str], int]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) < min_fields or (max_fields is not None and len(fields) > max_fields):
            want = f"{min_fields}" if max_fields == min_fields else f"at least {min_fields}"
            raise PrepareError(f"{path}:{lineno}: expected {want} fields, got {len(fields)}: {line.strip()!r}")
        if fields[0] in table:
            raise PrepareError(f"{path}:{lineno}: {fields[0]} appears twice (first on line {table[fields[0]][1]})")
        table[fields[0]] = (fields[1:], lineno)
    return table


class KaldiReport:
    """Records found plus the problems met, by name."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.text_without_audio: list[str] = []
        self.audio_without_text: list[str] = []
        self.unreadable: list[str] = []

    @property
    def problems(self) -> int:
        return len(self.text_without_audio) + len(self.audio_without_text) + len(self.unreadable)


def _wav_scp(path: Path) -> dict[str, Path]:
    wavs: dict[str, Path] = {}
    seen: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        key, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        where = f"{path}:{lineno}"
        if not rest:
            raise PrepareError(f"{where}: expected '<recording-id> <path>', got {line.strip()!r}")
        if rest.endswith("|"):
            raise PrepareError(
                f"{where}: {key} is a command pipeline ({rest!r}); asr reads audio files directly. Write the "
                "audio to files first (e.g. with Kaldi's wav-copy or sox) and list their paths in wav.scp"
            )
        if _ARK_OFFSET.search(rest):
            raise PrepareError(f"{where}: {key} points into an ark archive ({rest!r}); list plain audio files")
        if key in seen:
            raise PrepareError(f"{where}: {key} appears twice (first on line {seen[key]})")
        seen[key] = lineno
        wavs[key] = Path(rest).absolute()
    return wavs


def read_kaldi_dir(data_dir: str | os.PathLike, num_workers: int = 8, progress: bool = True) -> KaldiReport:
    """Read a data directory into manifest records (ids are the utterance ids, segments included)."""
    d = Path(data_dir)
    for name in ("wav.scp", "text"):
        if not (d / name).is_file():
            raise PrepareError(f"{d}: not a Kaldi data directory ({name} is missing)")
    wavs = _wav_scp(d / "wav.scp")
    texts = {k: " ".join(v) for k, (v, _) in _read_table(d / "text", 1).items()}
    spk = {k: v[0] for k, (v, _) in _read_table(d / "utt2spk", 2, 2).items()} if (d / "utt2spk").is_file() else {}
    rep = KaldiReport()

    # utterance id -> (recording path, offset, end or None)
    utts: dict[str, tuple[Path, float, float | None]] = {}
    if (d / "segments").is_file():
        for utt, ((rec, start, end), lineno) in _read_table(d / "segments", 4, 4).items():
            where = f"{d / 'segments'}:{lineno}"
            if rec not in wavs:
                raise PrepareError(f"{where}: recording {rec} of segment {utt} is not in wav.scp")
            try:
                t0, t1 = float(start), float(end)
            except ValueError:
                raise PrepareError(f"{where}: start and end must be seconds, got {start!r} {end!r}") from None
            if t0 < 0 or (t1 >= 0 and t1 <= t0):
                raise PrepareError(f"{where}: segment {utt} has start {t0} and end {t1} (need 0 <= start < end)")
            utts[utt] = (wavs[rec], t0, None if t1 < 0 else t1)  # end -1: to the end of the recording
    else:
        utts = {k: (p, 0.0, None) for k, p in wavs.items()}

    rep.text_without_audio = sorted(set(texts) - set(utts))
    rep.audio_without_text = sorted(set(utts) - set(texts))
    keep = sorted(set(utts) & set(texts))
    need_header = sorted({str(utts[u][0]) for u in keep if utts[u][2] is None})
    with ThreadPoolExecutor(max(1, num_workers)) as pool:
        durs = dict(zip(need_header, tqdm(pool.map(_duration, map(Path, need_header)), total=len(need_header),
                                          desc="durations", unit="file", disable=not progress), strict=True))
    for utt in keep:
        path, t0, t1 = utts[utt]
        if not path.is_file():
            rep.unreadable.append(f"{path}: no such file (utterance {utt}; relative paths are read from {Path.cwd()})")
            continue
        if t1 is None:
            total = durs[str(path)]
            if isinstance(total, str):
                rep.unreadable.append(f"{path}: {total}")
                continue
            if t0 >= total:
                rep.unreadable.append(f"{path}: segment {utt} starts at {t0} s, after the end ({total:.3f} s)")
                continue
            dur = total - t0
        else:
            dur = t1 - t0
        rec: dict = {"id": utt, "audio": str(path), "duration": round(dur, 4), "text": texts[utt]}
        if utt in spk:
            rec["speaker"] = spk[utt]
        if t0 > 0 or t1 is not None:
            rec["offset"] = t0
            if t1 is not None:
                rec["end"] = t1
        rep.records.append(rec)
    return rep


def prepare_kaldi(
    data_dir: str | os.PathLike, out: str | os.PathLike, *, strict: bool = False, num_workers: int = 8,
    progress: bool = True,
) -> KaldiReport:
    """Write the manifest ``out`` for a Kaldi data directory; mismatches are logged and counted."""
    rep = read_kaldi_dir(data_dir, num_workers=num_workers, progress=progress)
    report_unmatched(str(data_dir), rep, strict, PrepareError)
    if not rep.records:
        raise PrepareError(f"{data_dir}: no utterance has both audio and a transcript")
    write_manifest(out, rep.records)
    return rep
