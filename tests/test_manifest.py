"""Manifests: JSON Lines round trip, relative paths, and errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.data.manifest import ManifestError, read_manifest, write_manifest


def _wav(path: Path, seconds: float = 0.5) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), np.zeros(int(16000 * seconds), np.float32), 16000)
    return path


def _lines(path: Path, *objs: object) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return path


def test_round_trip_relative_and_absolute(tmp_path) -> None:
    inside = _wav(tmp_path / "data" / "wav" / "a.wav")
    outside = _wav(tmp_path / "elsewhere" / "b.wav")
    recs = [
        {"id": "a", "audio": str(inside), "duration": 0.5, "text": "HELLO", "speaker": "s1", "extra": [1, 2]},
        {"id": "b", "audio": str(outside), "duration": 0.25, "text": "", "offset": 0.1, "end": 0.35},
    ]
    m = tmp_path / "data" / "train.jsonl"
    assert write_manifest(m, recs) == 2
    raw = [json.loads(line) for line in m.read_text().splitlines()]
    assert raw[0]["audio"] == "wav/a.wav"  # inside the manifest's folder: relative
    assert raw[1]["audio"] == str(outside)  # elsewhere: absolute
    back = read_manifest(m)
    assert [r["audio"] for r in back] == [str(inside), str(outside)]
    assert back[0]["extra"] == [1, 2] and back[0]["speaker"] == "s1"
    assert back[1]["offset"] == 0.1 and back[1]["end"] == 0.35 and back[1]["text"] == ""
    # the folder can move as a whole
    moved = tmp_path / "moved"
    (tmp_path / "data").rename(moved)
    assert read_manifest(moved / "train.jsonl", check_audio=False)[0]["audio"] == str(moved / "wav" / "a.wav")


def test_blank_lines_are_allowed(tmp_path) -> None:
    a = _wav(tmp_path / "a.wav")
    m = _lines(tmp_path / "m.jsonl", {"id": "a", "audio": "a.wav", "duration": 1, "text": "X"}, "", "   ")
    recs = read_manifest(m)
    assert len(recs) == 1 and recs[0]["audio"] == str(a) and isinstance(recs[0]["duration"], float)


GOOD = {"id": "a", "audio": "a.wav", "duration": 0.5, "text": "A"}


@pytest.mark.parametrize(
    "second_line, message",
    [
        ('{"id": "b", "audio": "a.wav", "duration": 0.5, "text": "B"', r":2: not valid JSON"),
        ('["a list"]', r":2: expected a JSON object"),
        ({"id": "b", "audio": "a.wav", "text": "B"}, r":2: missing key\(s\) 'duration'"),
        ({"id": "b", "duration": 1.0}, r":2: missing key\(s\) 'audio', 'text'"),
        ({**GOOD}, r":2: duplicate id 'a' \(first on line 1\)"),
        ({**GOOD, "id": "b", "audio": "nope.wav"}, r":2: audio file .*nope.wav.* of 'b' does not exist"),
        ({**GOOD, "id": "b", "duration": "long"}, r":2: 'duration' must be a finite number"),
        ({**GOOD, "id": "b", "duration": 0}, r":2: 'duration' must be > 0"),
        ({**GOOD, "id": "b", "offset": 1.0, "end": 0.5}, r":2: 'end' must be > 1.0"),
        ({**GOOD, "id": "b", "text": None}, r":2: 'text' must be a string"),
        ({**GOOD, "id": ""}, r":2: 'id' is empty"),
    ],
)
def test_errors_name_file_and_line(tmp_path, second_line, message: str) -> None:
    _wav(tmp_path / "a.wav")
    m = _lines(tmp_path / "bad.jsonl", GOOD, second_line)
    with pytest.raises(ManifestError, match=str(m).replace(".", r"\.") + message):
        read_manifest(m)


def test_missing_manifest_and_write_checks(tmp_path) -> None:
    with pytest.raises(ManifestError, match="no such manifest"):
        read_manifest(tmp_path / "none.jsonl")
    with pytest.raises(ManifestError, match="duplicate id 'a'"):
        write_manifest(tmp_path / "w.jsonl", [GOOD, GOOD])
    with pytest.raises(ManifestError, match="lacks duration"):
        write_manifest(tmp_path / "w.jsonl", [{"id": "x", "audio": "a", "text": ""}])
    assert not (tmp_path / "w.jsonl").exists()  # nothing half-written
    assert not list(tmp_path.glob(".w.jsonl.tmp*"))
