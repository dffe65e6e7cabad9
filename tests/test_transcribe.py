"""Long-form transcription, output formats, `asr decode`/`asr transcribe`/`asr score` end to end."""

from __future__ import annotations

import importlib
import json
import re

import pytest
import soundfile as sf
import torch
from helpers_decode import librispeech_records, make_model_dir

import asr
from asr.cli import main
from asr.config import ConfigError, DecodeConfig
from asr.decode import recognize
from asr.features.audio import fbank_batch, load_audio
from asr.inference.transcribe import Transcriber, find_cut, to_srt, to_vtt

tmod = importlib.import_module("asr.inference.transcribe")  # the module; `asr.inference.transcribe` is the function
CTC = DecodeConfig(mode="ctc_greedy")


@pytest.fixture(scope="module")
def model_dir(data_root, tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("model"), data_root)


@pytest.fixture(scope="module")
def recognizer(model_dir):
    return asr.load_model(model_dir)


@pytest.fixture(scope="module")
def long_wav(data_root, tmp_path_factory):
    """About 75 s of real speech: LibriSpeech utterances separated by 0.8 s of silence.
    Returns the path and the (start, end) seconds of each silence."""
    recs = sorted(librispeech_records(data_root), key=lambda r: r["id"])[:8]
    parts, gaps, t = [], [], 0.0
    for r in recs:
        wav = load_audio(r["audio"])
        parts += [wav, torch.zeros(12800)]
        t += wav.numel() / 16000
        gaps.append((t, t + 0.8))
        t += 0.8
    path = tmp_path_factory.mktemp("long") / "long.flac"
    sf.write(path, torch.cat(parts).numpy(), 16000)
    return path, gaps


def test_find_cut_lands_in_pause():
    g = torch.Generator().manual_seed(0)
    wav = torch.randn(16000 * 10, generator=g) * 0.3
    wav[16000 * 6 : int(16000 * 6.5)] *= 0.01  # a pause at 6.0-6.5 s
    wav[int(16000 * 8.2) : int(16000 * 8.22)] = 0.0  # a 20 ms stop: too short to be a pause
    cut = find_cut(wav, 16000, 3.0, 10.0)
    assert 6.0 * 16000 < cut < 6.5 * 16000


def test_long_file_cut_in_pauses_and_joined(recognizer, long_wav, monkeypatch):
    path, gaps = long_wav
    reads = []

    def spy(p, sr=16000, offset=0.0, end=None):
        wav = load_audio(p, sr, offset, end)
        reads.append(wav.numel() / sr)
        return wav

    monkeypatch.setattr(tmod, "load_audio", spy)
    tr = Transcriber(recognizer, CTC, window=30.0, batch_size=2)
    t = tr.transcribe_file(path)
    duration = sf.info(path).duration
    assert t.duration == pytest.approx(duration, abs=1e-3)
    assert max(reads) <= 30.0 + 1e-6 and len(reads) == len(t.segments)  # never more than a window in memory
    assert len(t.segments) >= 3
    assert t.segments[0].start == 0.0 and t.segments[-1].end == pytest.approx(duration, abs=2e-3)
    for a, b in zip(t.segments, t.segments[1:], strict=False):
        assert a.end == b.start  # contiguous, no overlap
        assert any(lo <= a.end <= hi for lo, hi in gaps), f"cut at {a.end} s is not in a pause"
    assert all(s.end - s.start <= 30.0 + 1e-3 for s in t.segments)
    assert t.text == " ".join(s.text for s in t.segments if s.text) and t.text

    # the same windows from memory give the same result, and each window alone decodes the same
    t2 = Transcriber(recognizer, CTC, window=30.0, batch_size=8).transcribe_waveform(load_audio(path), 16000)
    assert [(s.start, s.end, s.text) for s in t2.segments] == [(s.start, s.end, s.text) for s in t.segments]
    wav = load_audio(path)
    for s in t.segments[:2]:
        piece = wav[int(round(s.start * 16000)) : int(round(s.end * 16000))]
        feats = fbank_batch([piece])[0]
        (h,) = recognize(recognizer.model, feats[None], torch.tensor([feats.shape[0]]), CTC)
        assert recognizer.text(h.tokens) == s.text


def test_python_api(model_dir, recognizer, long_wav, data_root):
    rec = librispeech_records(data_root)[0]
    wav = load_audio(rec["audio"])
    texts = asr.transcribe(model_dir, [rec["audio"], wav], mode="ctc_greedy")
    assert isinstance(texts, list) and len(texts) == 2 and texts[0] == texts[1] and texts[0]
    one = asr.transcribe(recognizer, rec["audio"], beam_size=2, mode="rescore")
    assert isinstance(one, str)
    with pytest.raises(asr.AudioError, match="nope.wav"):
        asr.transcribe(recognizer, "nope.wav")


def test_cli_transcribe_formats_and_bad_file(model_dir, long_wav, tmp_path, capsys):
    path, _ = long_wav
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF1234WAVEjunk")
    rc = main(["transcribe", str(path), str(bad), "--model", str(model_dir), "--format", "srt", "--mode", "ctc_greedy"])
    out, err = capsys.readouterr()
    assert rc == 1 and "bad.wav" in err and "1 of 2 files failed" in err
    cues = re.findall(r"(\d+)\n(\d\d:\d\d:\d\d,\d{3}) --> (\d\d:\d\d:\d\d,\d{3})\n(.+)\n", out)
    assert len(cues) >= 3 and cues[0][0] == "1" and cues[0][1] == "00:00:00,000"

    rc = main(["transcribe", str(path), "--model", str(model_dir), "--format", "json", "--mode", "ctc_greedy"])
    obj = json.loads(capsys.readouterr().out)
    assert rc == 0 and obj["file"] == str(path) and obj["segments"][0]["start"] == 0.0
    assert obj["text"] == " ".join(s["text"] for s in obj["segments"] if s["text"])

    rc = main(
        [
            "transcribe",
            str(path),
            "--model",
            str(model_dir),
            "--format",
            "vtt",
            "--mode",
            "ctc_greedy",
            "--output-dir",
            str(tmp_path / "out"),
        ]
    )
    vtt = (tmp_path / "out" / "long.vtt").read_text()
    assert rc == 0 and vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")


def test_srt_vtt_timestamps():
    t = tmod.Transcript(
        "x",
        "a b",
        3725.5,
        [tmod.Segment(0.0, 1.25, "a"), tmod.Segment(1.25, 2.0, ""), tmod.Segment(3600.0, 3725.5, "b")],
    )
    assert to_srt(t) == "1\n00:00:00,000 --> 00:00:01,250\na\n\n2\n01:00:00,000 --> 01:02:05,500\nb\n\n"
    assert to_vtt(t).splitlines()[2] == "00:00:00.000 --> 00:00:01.250"


def test_cli_decode_then_score(model_dir, data_root, tmp_path, capsys):
    import jiwer

    from asr.text import normalize

    recs = librispeech_records(data_root)[:10]
    bad = tmp_path / "corrupt.flac"
    bad.write_bytes(b"fLaC" + b"\0" * 100)
    recs.append({"id": "corrupt", "audio": str(bad), "duration": 3.0, "text": "A B"})
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in recs))
    outs = []
    for max_frames in ("4000", "40000"):
        hyp = tmp_path / f"decode{max_frames}" / "hyp.jsonl"  # a directory that does not exist yet
        rc = main(
            [
                "decode",
                "--model",
                str(model_dir),
                "--manifest",
                str(manifest),
                "--out",
                str(hyp),
                "--mode",
                "rescore",
                "--beam-size",
                "3",
                "--max-frames",
                max_frames,
                "--num-workers",
                "0",
            ]
        )
        captured = capsys.readouterr()
        assert rc == 1 and "corrupt" in captured.err and "RTF" in captured.out
        lines = [json.loads(x) for x in hyp.read_text().splitlines()]
        assert sorted(x["id"] for x in lines) == sorted(r["id"] for r in recs[:-1])
        assert all(set(x) == {"id", "text", "score"} for x in lines)
        settings = json.loads(hyp.with_suffix(".settings.json").read_text())
        assert settings["decode"]["mode"] == "rescore" and settings["decode"]["beam_size"] == 3
        assert settings["decode"]["max_frames"] == int(max_frames) and settings["failed"] == ["corrupt"]
        assert settings["decoded"] == len(lines) and settings["model"] == str(model_dir.resolve())
        outs.append({x["id"]: x["text"] for x in lines})
    assert outs[0] == outs[1]  # batching does not change results

    rc = main(["score", "--ref", str(manifest), "--hyp", str(hyp), "--json", "--report", str(tmp_path / "rep.txt")])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["missing"] == ["corrupt"] and res["sentences"] == len(recs)
    refs = [normalize(r["text"]) for r in recs]
    hyps = [normalize(outs[1].get(r["id"], "")) for r in recs]
    o = jiwer.process_words(refs, hyps)
    assert (res["sub"], res["del"], res["ins"]) == (o.substitutions, o.deletions, o.insertions)
    assert res["wer"] == pytest.approx(100 * o.wer, abs=1e-3)
    assert "MISSING HYPOTHESIS" in (tmp_path / "rep.txt").read_text()


def test_cli_decode_at_a_speed(model_dir, recognizer, data_root, tmp_path, capsys):
    """`asr decode --speed F` plays every utterance F times faster: the features of the resampled audio."""
    from asr.data.dataset import ASRDataset
    from asr.features.audio import speed_perturb

    rec = librispeech_records(data_root)[0]
    sr = recognizer.config.data.sample_rate
    item = ASRDataset([{**rec, "speed": 1.25}], recognizer.tokenizer, recognizer.config.data, train=False)[0]
    want = recognizer.features([speed_perturb(load_audio(rec["audio"], sr), sr, 1.25)])[0]
    assert item["speed"] == 1.25 and torch.equal(item["feats"], want)
    plain = ASRDataset([rec], recognizer.tokenizer, recognizer.config.data, train=False)[0]
    assert plain["speed"] == 1.0 and plain["feats"].shape[0] > want.shape[0]

    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps(rec) + "\n")
    hyp = tmp_path / "hyp.jsonl"
    args = ["decode", "--model", str(model_dir), "--manifest", str(manifest), "--out", str(hyp), "--mode",
            "ctc_greedy", "--num-workers", "0"]  # fmt: skip
    texts = {}
    for speed in ("1.25", None):
        assert main(args + (["--speed", speed] if speed else [])) == 0
        texts[speed] = json.loads(hyp.read_text())["text"]
        assert json.loads(hyp.with_suffix(".settings.json").read_text())["decode"]["speed"] == float(speed or 1.0)
    with torch.inference_mode():
        mem, lens = recognizer.model.encode(want[None], torch.tensor([want.shape[0]]))
        ids = recognizer.model.ctc_log_probs(mem)[0].argmax(-1).unique_consecutive()
    assert texts["1.25"] == recognizer.text([i for i in ids.tolist() if i != 0])
    # decode.speed is the model's setting: asr transcribe plays the file at it too (and --speed overrides it)
    from asr.inference.transcribe import Transcriber

    fast = recognizer.config.decode.updated(mode="ctc_greedy", speed=1.25)
    assert Transcriber(recognizer, fast).transcribe_file(rec["audio"]).text == texts["1.25"]
    with pytest.raises(ConfigError, match="decode.speed: expected a positive number"):
        recognizer.config.decode.updated(speed=0.0)
    with pytest.raises(SystemExit):
        main([*args, "--speed", "0"])
    assert "expected a positive number" in capsys.readouterr().err


def test_cli_decode_and_transcribe_at_several_speeds(model_dir, recognizer, data_root, tmp_path, capsys):
    """`--speeds` (decode.speeds): one test-time ensemble of the audio at each speed, by asr decode and
    asr transcribe alike; a single --speed replaces it."""
    from asr.data.dataset import collate
    from asr.features.audio import speed_perturb

    recs = sorted(librispeech_records(data_root), key=lambda r: r["duration"])[:3]
    manifest, hyp = tmp_path / "m.jsonl", tmp_path / "hyp.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in recs))
    args = ["decode", "--model", str(model_dir), "--manifest", str(manifest), "--out", str(hyp), "--mode", "ctc_beam",
            "--beam-size", "3", "--num-workers", "0", "--speeds", "0.9,1.2"]  # fmt: skip
    assert main(args) == 0
    got = {r["id"]: r["text"] for r in map(json.loads, hyp.read_text().splitlines())}
    settings = json.loads(hyp.with_suffix(".settings.json").read_text())["decode"]
    assert settings["speeds"] == [0.9, 1.2] and settings["speed"] == 1.0
    sr = recognizer.config.data.sample_rate
    cfg = recognizer.config.decode.updated(mode="ctc_beam", beam_size=3, speeds=[0.9, 1.2])
    views = []
    for f in (0.9, 1.2):
        feats = recognizer.features([speed_perturb(load_audio(r["audio"], sr), sr, f) for r in recs])
        b = collate([{"id": r["id"], "feats": x, "tokens": torch.zeros(0, dtype=torch.long), "duration": 1.0}
                     for r, x in zip(recs, feats, strict=True)])  # fmt: skip
        views.append((b.ids, b.feats, b.feat_lens))
    want = {u: recognizer.text(h.tokens) for u, h in recognizer.recognize_views(views, cfg).items()}
    assert got == want and any(got.values())  # a trained model: not every text empty
    assert Transcriber(recognizer, cfg).transcribe_file(recs[0]["audio"]).text == want[recs[0]["id"]]
    assert main([*args, "--speed", "1.2"]) == 0  # one speed: the ensemble is off
    assert json.loads(hyp.with_suffix(".settings.json").read_text())["decode"]["speeds"] == []
    with pytest.raises(ConfigError, match=r"decode.speeds: expected two or more positive numbers"):
        recognizer.config.decode.updated(speeds=[1.1])
    with pytest.raises(ConfigError, match=r"decode.speed: expected 1.0 beside decode.speeds"):
        recognizer.config.decode.updated(speed=1.1, speeds=[1.0, 1.1])
    with pytest.raises(SystemExit):
        main([*args[:-1], "1.1"])
    assert "two or more speeds" in capsys.readouterr().err
