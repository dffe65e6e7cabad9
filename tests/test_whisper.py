"""Whisper in asr, against openai-whisper's, transformers' and CTranslate2's own outputs.

The fixtures (tests/fixtures/whisper, made by tests/make_whisper_fixtures.py in the peers'
environment) are small random Whisper models, English-only and multilingual (large-v3's 128 mel
bins, 100 languages), in the three forms people hold, and what openai-whisper computed with them
on 8 LibriSpeech utterances of ../shared/data: log-mel features, encoder outputs, teacher-forced
logits, and ``whisper.decode``'s greedy and beam-5 results, with and without timestamps, with
language detection and translation. Random models are the hard case for a search: they are
unsure of everything, and most of their outputs run to the 224-token limit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("tokenizers", reason="the 'whisper' extra: pip install 'asr[whisper]'")

from asr.config import DecodeConfig  # noqa: E402
from asr.features.whisper import whisper_log_mel  # noqa: E402
from asr.importers.whisper import WhisperImportError, import_whisper, read_ct2_variables, read_whisper  # noqa: E402
from asr.inference import load_model  # noqa: E402
from asr.whisper_text import WhisperTokenizer  # noqa: E402

FIX = Path(__file__).parent / "fixtures" / "whisper"
DECODE = json.loads((FIX / "decode.json").read_text())
UTTS = DECODE["utterances"]
SCORE_TOL = 1e-4


def _audio(root: Path, uid: str) -> torch.Tensor:
    import soundfile as sf

    spk, chap, _ = uid.split("-")
    hits = list((root / "LibriSpeech").glob(f"*/{spk}/{chap}/{uid}.flac"))
    assert hits, f"{uid}.flac not found under {root / 'LibriSpeech'}"
    audio, sr = sf.read(hits[0], dtype="float32")
    assert sr == 16000
    return torch.from_numpy(audio)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("whisper")
    return {
        "en": import_whisper(FIX / "en" / "openai.pt", out / "en", tokenizer=FIX / "en" / "hf"),
        "en_hf": import_whisper(FIX / "en" / "hf", out / "en_hf"),
        "en_ct2": import_whisper(FIX / "en" / "ct2", out / "en_ct2"),
        "v3": import_whisper(FIX / "v3" / "openai.pt", out / "v3", tokenizer=FIX / "v3" / "tokenizer.json"),
    }


@pytest.fixture
def mels(data_root) -> dict[str, torch.Tensor]:
    return {uid: _audio(data_root, uid) for uid in UTTS}


# -------------------------------------------------------------------------------------------------
# features, import, forward


def test_log_mel_equals_whisper(mels):
    ref = np.load(FIX / "features.npz")
    worst = 0.0
    for key in ref.files:
        if not key.startswith("mel"):
            continue
        kind, uid = key.rsplit("_", 1)
        n_mels = 128 if kind.startswith("mel128") else 80
        ours = whisper_log_mel(mels[uid], n_mels, pad_to=0.0 if "nopad" in kind else 30.0).T.numpy()
        assert ours.shape == ref[key].shape, key
        worst = max(worst, float(np.abs(ours - ref[key]).max()))
    assert worst <= 1e-5, worst


def test_three_forms_import_to_the_same_tensors(models):
    ref = torch.load(models["en"] / "model.pt", weights_only=True)
    for form in ("en_hf", "en_ct2"):
        other = torch.load(models[form] / "model.pt", weights_only=True)
        assert other.keys() == ref.keys()
        for k in ref:
            assert torch.equal(ref[k], other[k]), (form, k)


@pytest.mark.parametrize("name", ["en", "v3"])
def test_encoder_and_teacher_forced_logits(models, mels, name):
    rec = load_model(models[name])
    fwd = torch.load(FIX / name / "forward.pt", weights_only=True)
    n_mels = rec.config.data.num_mel_bins
    feats = whisper_log_mel(mels[UTTS[0]], n_mels, pad_to=30.0).unsqueeze(0)
    with torch.inference_mode():
        memory, lens = rec.model.encode(feats, torch.tensor([feats.shape[1]]))
        assert (memory - fwd["audio_features"]).abs().max() <= 1e-4
        logits = rec.model.decoder(fwd["tokens"].unsqueeze(0), memory, lens)[0]  # (U, V)
    assert (logits[:, ::7] - fwd["logits_sub"]).abs().max() <= 1e-4
    assert (logits.logsumexp(-1) - fwd["logsumexp"]).abs().max() <= 1e-4
    assert torch.equal(logits.argmax(-1), fwd["logits_argmax"])


def test_ctranslate2_weight_types(tmp_path):
    f32 = read_whisper(FIX / "dtypes" / "ct2_float32")[1]
    bf16 = read_whisper(FIX / "dtypes" / "ct2_bfloat16")[1]
    hf = read_whisper(FIX / "dtypes" / "hf")[1]
    assert f32.keys() == bf16.keys() == hf.keys()
    for k in f32:
        assert torch.equal(f32[k], hf[k]), k  # float32 read exactly
        assert torch.equal(bf16[k], hf[k].bfloat16().float()), k  # bfloat16 exactly what it holds
    with pytest.raises(WhisperImportError, match="int8"):
        read_whisper(FIX / "dtypes" / "ct2_int8")


# -------------------------------------------------------------------------------------------------
# tokenizer


@pytest.mark.parametrize("name", ["en", "v3"])
def test_tokenizer_equals_whisper(name):
    ref = json.loads((FIX / "tokenize.json").read_text())[name]
    src = FIX / "en" / "hf" if name == "en" else FIX / "v3" / "tokenizer.json"
    tok = WhisperTokenizer(src, multilingual=name == "v3")
    special = DECODE["tokenizers"][name]
    for k in ("eot", "sot", "no_speech", "no_timestamps", "transcribe", "translate", "sot_prev", "sot_lm",
              "timestamp_begin"):
        assert getattr(tok, k) == special[k], k
    assert {f"<|{c}|>": tok.language_token(c) for c in tok.languages} == {
        k: v for k, v in ref["special"].items() if k.strip("<|>") in tok.languages}
    assert sorted(tok.languages) == sorted(special["language_codes"])
    for t in ref["transcripts"]:
        assert tok.encode(t["text"]) == t["ids"], t["id"]
    model = DECODE["models"][name]["greedy"]
    assert tok.suppress_tokens == sorted(model["suppress_tokens"])
    assert tok.prompt("en" if name == "v3" else None) == model["initial_tokens"]
    first = ref["first_greedy"]
    assert tok.decode(first["tokens"]) == first["decode"].strip()


# -------------------------------------------------------------------------------------------------
# search


def _decode(model_dir: Path, audio: dict[str, torch.Tensor], uids: list[str], cfg: DecodeConfig):
    rec = load_model(model_dir)
    feats = rec.features([audio[u] for u in uids])
    x = torch.stack(feats)
    return rec, rec.recognize(x, torch.full((len(uids),), x.shape[1]), cfg)


CASES = [("en", "greedy"), ("en", "beam5"), ("en", "greedy_timestamps"), ("en", "beam5_timestamps"),
         ("v3", "greedy"), ("v3", "beam5"), ("v3", "greedy_timestamps"), ("v3", "beam5_timestamps"),
         ("v3", "greedy_translate"), ("v3", "beam5_translate")]


@pytest.mark.parametrize("batch", [8, 1])
@pytest.mark.parametrize("name,case", CASES)
def test_search_equals_whisper_decode(models, mels, name, case, batch):
    ref = DECODE["models"][name][case]
    opts = ref["options"]
    cfg = DecodeConfig(rules="whisper", beam_size=opts["beam_size"] or 1, patience=opts["patience"] or 1.0,
                       ctc_weight=0.0, timestamps=not opts["without_timestamps"], language=opts["language"] or "",
                       task=opts["task"])
    expected = ref["alone"]  # openai-whisper's beam search fails on batches (openai/whisper#2197): each alone
    groups = [UTTS] if batch == 8 else [[u] for u in UTTS]
    got = []
    for g in groups:
        rec, hyps = _decode(models[name], mels, g, cfg)
        got += hyps
    worst_avg = worst_rel = 0.0
    for uid, h, e in zip(UTTS, got, expected, strict=True):
        assert h.tokens == e["tokens"], (uid, len(h.tokens), len(e["tokens"]))
        assert rec.text(h.tokens) == e["text"], uid
        assert h.language == e["language"], uid
        # Whisper's avg_logprob: the sum over the tokens and end of text, / (tokens + 1)
        worst_avg = max(worst_avg, abs(h.score / (len(h.tokens) + 1) - e["avg_logprob"]))
        worst_rel = max(worst_rel, abs(h.score - e["sum_logprob"]) / max(1.0, abs(e["sum_logprob"])))
    print(f"\n{name} {case} batch {batch}: max |avg_logprob diff| {worst_avg:.1e}, relative sum {worst_rel:.1e}")
    assert worst_avg <= SCORE_TOL, worst_avg
    assert worst_rel <= 1e-5, worst_rel  # sums of up to 225 float32 log-probabilities, to -1000 and below


# -------------------------------------------------------------------------------------------------
# bad input


def test_errors_name_the_file_and_tensor(tmp_path):
    bad = tmp_path / "ct2"
    bad.mkdir()
    data = (FIX / "en" / "ct2" / "model.bin").read_bytes()
    (bad / "model.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(WhisperImportError, match=r"model\.bin: truncated"):
        read_ct2_variables(bad / "model.bin")
    with pytest.raises(WhisperImportError, match="carries no tokenizer.json"):
        import_whisper(FIX / "en" / "openai.pt", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    ckpt = torch.load(FIX / "en" / "openai.pt", weights_only=True)
    ckpt["model_state_dict"]["decoder.ln.weight"] = torch.zeros(5)
    torch.save(ckpt, tmp_path / "shape.pt")
    with pytest.raises(WhisperImportError, match=r"'decoder\.ln\.weight' has shape \(5,\), the dims need \(8,\)"):
        import_whisper(tmp_path / "shape.pt", tmp_path / "out2", tokenizer=FIX / "en" / "hf")
    assert not (tmp_path / "out2").exists()
    torch.save({"model": {}}, tmp_path / "foreign.pt")
    with pytest.raises(WhisperImportError, match="not an OpenAI Whisper checkpoint"):
        import_whisper(tmp_path / "foreign.pt", tmp_path / "out3", tokenizer=FIX / "en" / "hf")


def test_without_the_extra_the_error_names_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"asr\[whisper\]"):
        WhisperTokenizer(FIX / "en" / "hf", multilingual=False)


def test_no_nan_scores_in_fixture():
    for name in ("en", "v3"):
        for case in DECODE["models"][name].values():
            if isinstance(case, dict) and "alone" in case:
                assert all(math.isfinite(r["sum_logprob"]) for r in case["alone"])
