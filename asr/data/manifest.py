"""Manifests: one utterance per line of JSON (JSON Lines), the one data format of every corpus.

    {"id": "1272-128104-0000", "audio": "/data/LibriSpeech/dev-clean/1272/128104/1272-128104-0000.flac",
     "duration": 5.855, "text": "MISTER QUILTER IS ...", "speaker": "1272"}

Required: ``id`` (unique), ``audio`` (absolute, or relative to the manifest's folder),
``duration`` (seconds), ``text``. Optional: ``speaker``, and ``offset``/``end`` (seconds) for a
segment of a longer file (``duration`` is then the segment's). Other keys are kept as they are.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from asr.atomic import atomic_write

__all__ = ["ManifestError", "read_manifest", "write_manifest", "report_unmatched", "REQUIRED_KEYS"]

log = logging.getLogger(__name__)

REQUIRED_KEYS = ("id", "audio", "duration", "text")


class ManifestError(ValueError):
    """A malformed manifest; the message names the file and the line."""


def _number(rec: dict, key: str, where: str, minimum: float | None = None, strict: bool = False) -> float:
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ManifestError(f"{where}: {key!r} must be a finite number of seconds, got {v!r}")
    if minimum is not None and (v <= minimum if strict else v < minimum):
        raise ManifestError(f"{where}: {key!r} must be {'>' if strict else '>='} {minimum}, got {v!r}")
    return float(v)


def read_manifest(path: str | os.PathLike, check_audio: bool = True) -> list[dict[str, Any]]:
    """Read and validate a manifest; ``audio`` comes back as an absolute path.

    Raises :class:`ManifestError` (``file:line: problem``) for bad JSON, a missing or mistyped
    key, a duplicate id, a segment with ``end <= offset``, or (``check_audio``) an audio file
    that does not exist. Blank lines are allowed.
    """
    p = Path(path)
    if not p.is_file():
        raise ManifestError(f"{p}: no such manifest")
    base = p.absolute().parent
    records: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ManifestError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(rec, dict):
                raise ManifestError(f"{where}: expected a JSON object, got {type(rec).__name__}")
            missing = [k for k in REQUIRED_KEYS if k not in rec]
            if missing:
                raise ManifestError(f"{where}: missing key(s) {', '.join(map(repr, missing))}")
            for k in ("id", "audio", "text"):
                if not isinstance(rec[k], str):
                    raise ManifestError(f"{where}: {k!r} must be a string, got {rec[k]!r}")
            if not rec["id"]:
                raise ManifestError(f"{where}: 'id' is empty")
            if rec["id"] in seen:
                raise ManifestError(f"{where}: duplicate id {rec['id']!r} (first on line {seen[rec['id']]})")
            seen[rec["id"]] = lineno
            rec["duration"] = _number(rec, "duration", where, 0.0, strict=True)
            if "offset" in rec:
                rec["offset"] = _number(rec, "offset", where, 0.0)
            if "end" in rec:
                rec["end"] = _number(rec, "end", where, rec.get("offset", 0.0), strict=True)
            if "speaker" in rec and not isinstance(rec["speaker"], str):
                rec["speaker"] = str(rec["speaker"])
            audio = Path(rec["audio"])
            if not audio.is_absolute():
                audio = base / audio
            if check_audio and not audio.is_file():
                raise ManifestError(f"{where}: audio file {str(audio)!r} of {rec['id']!r} does not exist")
            rec["audio"] = os.path.normpath(audio)
            records.append(rec)
    log.debug("read %d utterances from %s", len(records), p)
    return records


def write_manifest(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> int:
    """Write ``records`` as JSON Lines (atomically: a temporary file renamed into place).

    ``audio`` paths inside the manifest's folder are written relative to it, so a data folder
    can be moved as a whole; others are written absolute. Returns the number of lines.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    base = p.absolute().parent
    n = 0
    ids: set[str] = set()
    with atomic_write(p) as f:
        for rec in records:
            missing = [k for k in REQUIRED_KEYS if k not in rec]
            if missing:
                raise ManifestError(f"{p}: record {rec.get('id', n)!r} lacks {', '.join(missing)}")
            if rec["id"] in ids:
                raise ManifestError(f"{p}: duplicate id {rec['id']!r}")
            ids.add(rec["id"])
            out = dict(rec)
            audio = Path(os.path.normpath(Path(out["audio"]).absolute()))
            out["audio"] = str(audio.relative_to(base)) if audio.is_relative_to(base) else str(audio)
            f.write(json.dumps(out, ensure_ascii=False) + "\n")
            n += 1
    return n


def report_unmatched(where: str, report: Any, strict: bool, error: type[Exception] = ValueError) -> None:
    """Log, by name, transcripts without audio, audio without transcripts and unreadable files of an
    importer's ``report``; with ``strict`` raise ``error`` counting them."""
    for utt in report.text_without_audio:
        log.warning("%s: transcript of %s has no audio", where, utt)
    for item in report.audio_without_text:
        log.warning("%s: %s has no transcript", where, item)
    for problem in report.unreadable:
        log.warning("%s: unreadable audio %s", where, problem)
    if strict and report.problems:
        raise error(
            f"{where}: {len(report.text_without_audio)} transcript line(s) without audio, "
            f"{len(report.audio_without_text)} audio file(s) without transcript, {len(report.unreadable)} "
            "unreadable file(s) (named above); --strict makes these errors"
        )
