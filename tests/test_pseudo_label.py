"""Pseudo-labels (asr.data.pseudo_label, `asr pseudo-label`): the hypotheses become the transcripts, nothing of
the references is kept, and what cannot be labelled is counted and named."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import soundfile as sf

from asr.cli import main
from asr.data.manifest import ManifestError, read_manifest
from asr.data.pseudo_label import pseudo_label
from asr.scoring import ScoringError


def _corpus(tmp_path, n=4):
    (tmp_path / "wav").mkdir()
    recs = []
    for i in range(n):
        sf.write(tmp_path / "wav" / f"u{i}.wav", np.zeros(800, dtype=np.float32), 8000)
        recs.append({"id": f"u{i}", "audio": f"wav/u{i}.wav", "duration": 0.1, "text": f"REFERENCE {i}",
                     "speaker": "s", "takes": [f"{i}_s_0"]})  # fmt: skip
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return tmp_path / "test.jsonl"


def _hyps(path, pairs):
    path.write_text("".join(json.dumps({"id": i, "text": t, "score": -1.0}) + "\n" for i, t in pairs))
    return path


def test_hypotheses_replace_the_references_and_the_rest_is_counted(tmp_path, caplog):
    manifest = _corpus(tmp_path)
    hyp = _hyps(tmp_path / "hyp.jsonl", [("u2", "TWO"), ("u0", "ZERO ONE"), ("u3", " ")])  # u1 never decoded
    out = tmp_path / "adapt" / "pseudo.jsonl"
    with caplog.at_level(logging.WARNING):
        stats = pseudo_label(manifest, hyp, out)
    assert (stats.written, stats.no_hypothesis, stats.empty) == (2, ["u1"], ["u3"])
    assert "u1" in caplog.text and "u3" in caplog.text
    recs = read_manifest(out)  # a valid manifest whose audio resolves from its own folder
    assert [(r["id"], r["text"]) for r in recs] == [("u0", "ZERO ONE"), ("u2", "TWO")]  # the manifest's order
    assert recs[0]["audio"] == str(tmp_path / "wav" / "u0.wav") and recs[0]["speaker"] == "s"
    raw = out.read_text()
    assert "REFERENCE" not in raw and "takes" not in raw  # no key that names the words survives


def test_errors_name_the_files(tmp_path):
    manifest = _corpus(tmp_path)
    with pytest.raises(ManifestError, match=r"hyp\.jsonl: 1 hypotheses have ids that .*test\.jsonl does not hold "
                       r"\(e\.g\. 'other-7'\)"):  # fmt: skip
        pseudo_label(manifest, _hyps(tmp_path / "hyp.jsonl", [("u0", "A"), ("other-7", "B")]), tmp_path / "o.jsonl")
    with pytest.raises(ManifestError, match=r"hyp\.jsonl: no utterance .* non-empty hypothesis"):
        pseudo_label(manifest, _hyps(tmp_path / "hyp.jsonl", [("u0", "")]), tmp_path / "o.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"id": "u0", "text": "A"}\n{"id": "u1"}\n')
    with pytest.raises(ScoringError, match=r"bad\.jsonl:2: expected an object with 'id' and 'text'"):
        pseudo_label(manifest, tmp_path / "bad.jsonl", tmp_path / "o.jsonl")
    _hyps(tmp_path / "twice.jsonl", [("u0", "A"), ("u0", "B")])
    with pytest.raises(ScoringError, match=r"twice\.jsonl:2: duplicate id 'u0'"):
        pseudo_label(manifest, tmp_path / "twice.jsonl", tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


def test_command(tmp_path, capsys):
    manifest = _corpus(tmp_path, n=2)
    hyp = _hyps(tmp_path / "hyp.jsonl", [("u0", "A"), ("u1", "B")])
    out = tmp_path / "p.jsonl"
    assert main(["pseudo-label", "--manifest", str(manifest), "--hyp", str(hyp), "--out", str(out)]) == 0
    assert "2 utterances with their hypotheses as transcripts; left out: 0 without" in capsys.readouterr().out
    assert main(["pseudo-label", "--manifest", str(manifest), "--hyp", str(tmp_path / "none.jsonl"),
                 "--out", str(tmp_path / "q.jsonl")]) == 2  # fmt: skip
    assert "none.jsonl" in capsys.readouterr().err
