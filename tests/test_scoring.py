"""WER/CER scoring: equality with jiwer, missing/extra ids, file formats, report, interval."""

from __future__ import annotations

import json
import random

import jiwer
import numpy as np
import pytest

from asr.scoring import ScoringError, align, bootstrap_ci, edit_distance, read_transcripts, score
from asr.text import normalize


def _perturb(words: list[str], rng: random.Random, vocab: list[str]) -> list[str]:
    out = []
    for w in words:
        r = rng.random()
        if r < 0.1:
            continue  # deletion
        out.append(rng.choice(vocab) if r < 0.25 else w)  # substitution (sometimes by itself)
        if rng.random() < 0.1:
            out.append(rng.choice(vocab))  # insertion
    return out


def test_counts_equal_jiwer_on_random_pairs():
    rng = random.Random(0)
    vocab = ["a", "b", "c", "d", "e", "the", "of"]
    refs, hyps = {}, {}
    for i in range(300):
        ref = [rng.choice(vocab) for _ in range(rng.randint(1, 15))]
        hyps[f"u{i}"] = " ".join(_perturb(ref, rng, vocab) if i % 7 else rng.sample(vocab, rng.randint(0, 5)))
        refs[f"u{i}"] = " ".join(ref)
    res = score(refs, hyps, normalizer=None)
    ids = list(refs)
    for uid, u in zip(ids, res.utts, strict=True):
        o = jiwer.process_words(refs[uid], hyps[uid] if hyps[uid] else "")
        assert (u.sub, u.dels, u.ins) == (o.substitutions, o.deletions, o.insertions), uid
    o = jiwer.process_words([refs[i] for i in ids], [hyps[i] for i in ids])
    assert (res.sub, res.dels, res.ins) == (o.substitutions, o.deletions, o.insertions)
    assert res.wer == pytest.approx(100 * o.wer)
    assert res.cer == pytest.approx(100 * jiwer.cer([refs[i] for i in ids], [hyps[i] for i in ids]))
    assert res.sub > 50 and res.dels > 50 and res.ins > 30  # the test exercises all three


def test_real_transcripts_equal_jiwer(data_root):
    """LibriSpeech references against corrupted copies, both normalised with asr.text.normalize."""
    refs = {}
    for trans in sorted((data_root / "LibriSpeech").rglob("*.trans.txt")):
        refs.update(read_transcripts(trans))
    assert len(refs) >= 50
    rng = random.Random(1)
    vocab = sorted({w for t in refs.values() for w in t.split()})
    hyps = {k: " ".join(_perturb(t.lower().split(), rng, vocab)) + "." for k, t in refs.items()}
    res = score(refs, hyps)
    r = [normalize(refs[k]) for k in refs]
    h = [normalize(hyps[k]) for k in refs]
    o = jiwer.process_words(r, h)
    assert (res.sub, res.dels, res.ins, res.words) == (
        o.substitutions,
        o.deletions,
        o.insertions,
        o.hits + o.substitutions + o.deletions,
    )
    assert res.wer == pytest.approx(100 * o.wer)
    assert res.cer == pytest.approx(100 * jiwer.cer(r, h))
    lo, hi = res.ci
    assert lo < res.wer < hi and hi - lo < 10


def test_alignment_and_edit_distance():
    ops = align("the cat sat on the mat".split(), "the bat sat the mat down".split())
    assert [op for op, _, _ in ops] == ["=", "S", "=", "D", "=", "=", "I"]
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3


def test_missing_and_extra_ids():
    refs = {"a": "one two three", "b": "four five", "c": "six"}
    hyps = {"a": "one two three", "c": "six seven", "z": "nothing"}
    res = score(refs, hyps, normalizer=None)
    assert res.missing == ["b"] and res.extra == ["z"]
    assert (res.sub, res.dels, res.ins, res.words, res.sentences) == (0, 2, 1, 6, 3)
    assert res.wer == pytest.approx(50.0)
    assert res.ser == pytest.approx(200 / 3)
    d = res.to_dict()
    assert {"wer", "cer", "ser", "sub", "del", "ins", "words", "sentences"} <= d.keys()
    assert d["missing"] == ["b"] and d["extra"] == ["z"]
    text = res.report()
    assert "MISSING HYPOTHESIS" in text and "z" in text.split("WITHOUT A REFERENCE")[1]


def test_report_marks_errors_and_confusions():
    refs = {"u1": "I SAW THE CAT", "u2": "THE CAT RAN"}
    hyps = {"u1": "I SAW A CAT", "u2": "A CAT RAN AWAY"}
    res = score(refs, hyps)
    rep = res.report()
    assert "REF: I SAW the CAT" in rep and "HYP: I SAW a   CAT" in rep
    assert res.confusions()["substitutions"][0] == (("THE", "A"), 2)
    assert res.confusions()["insertions"] == [("AWAY", 1)]


def test_read_transcripts_formats(tmp_path):
    kaldi = tmp_path / "text"
    kaldi.write_text("utt1 HELLO WORLD\nutt2\n\nutt3 A  B\n")
    assert read_transcripts(kaldi) == {"utt1": "HELLO WORLD", "utt2": "", "utt3": "A  B"}
    jl = tmp_path / "hyp.jsonl"
    jl.write_text(
        json.dumps({"id": "x", "text": "hi", "score": -1.0}) + "\n" + json.dumps({"id": "y", "text": ""}) + "\n"
    )
    assert read_transcripts(jl) == {"x": "hi", "y": ""}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "text": "a"}\n{"id": "x", "text": "b"}\n')
    with pytest.raises(ScoringError, match=r"bad.jsonl:2: duplicate id 'x'"):
        read_transcripts(bad)
    bad.write_text('{"id": "x", "text": "a"}\n{"id": "y"\n')
    with pytest.raises(ScoringError, match=r"bad.jsonl:2: not valid JSON"):
        read_transcripts(bad)


def test_bootstrap_interval_narrows_with_more_data():
    rng = np.random.default_rng(0)
    words = rng.integers(5, 30, size=2000)
    errors = rng.binomial(words, 0.1)
    lo_s, hi_s = bootstrap_ci(errors[:100], words[:100])
    lo_l, hi_l = bootstrap_ci(errors, words)
    wer = 100 * errors.sum() / words.sum()
    assert lo_l < wer < hi_l
    assert hi_l - lo_l < (hi_s - lo_s) / 2
