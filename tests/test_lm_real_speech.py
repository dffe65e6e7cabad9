"""Shallow fusion on real speech: a small ASR model and an in-domain LM lower the WER on held-out utterances.

The data are the 58 LibriSpeech utterances of ../shared/data (10 chapters of dev-clean, test-clean
and test-other). Every 7th utterance (8 of them, 129 words) is held out; the ASR model (the tiny
config, char tokenizer) trains on the other utterances shorter than 12 s (42, 4.2 minutes of
audio) for 120 steps. Four minutes of speech cannot give a usable recogniser: alone it writes
letter soup (WER above 100%). The LM is a small Transformer trained on the transcripts of all 58
utterances, the held-out ones included: text that covers the held-out domain completely, the
extreme case of an in-domain LM (an oracle for the text, never for the audio). What the test shows
is that fusion works end to end on real audio: the acoustic evidence picks among the sentences the
LM knows, and the WER falls (measured: 182.9% without the LM, 117.8% with weight 1, 41.1% with
weight 2; the LM's perplexity on the held-out text 1.07 per character). It is a behavioural test,
not a timing one: about 2.5 minutes of one CPU thread, most of it the LM's 240 epochs.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers_decode import librispeech_records

from asr.config import TrainConfig, load_config
from asr.data.dataset import ASRDataset, collate
from asr.data.manifest import write_manifest
from asr.inference import load_model
from asr.lm import LMConfig, LMDataConfig, LMExperimentConfig, load_lm
from asr.lm.evaluate import perplexity
from asr.lm.task import LMTask
from asr.text import Tokenizer, normalize
from asr.training.train import train
from asr.training.validate import word_errors

REPO = Path(__file__).resolve().parents[1]


def wer(rec, records, batch, decode) -> float:
    errors = words = 0
    for r, h in zip(records, rec.recognize(batch.feats, batch.feat_lens, decode), strict=True):
        e, n = word_errors(normalize(r["text"]), normalize(rec.text(h.tokens)))
        errors, words = errors + e, words + n
    return 100.0 * errors / words


@pytest.mark.slow
def test_in_domain_lm_lowers_wer_on_held_out_speech(data_root, tmp_path):
    t0 = time.time()
    recs = sorted(librispeech_records(data_root), key=lambda r: r["id"])
    held = recs[::7][:8]
    held_ids = {r["id"] for r in held}
    train_recs = [r for r in recs if r["id"] not in held_ids and r["duration"] < 12]
    write_manifest(tmp_path / "train.jsonl", train_recs)
    Tokenizer.train([normalize(r["text"]) for r in recs], tmp_path / "tok", None, "char")
    cfg = load_config(REPO / "configs" / "tiny.yaml", [
        f"data.train={tmp_path / 'train.jsonl'}", f"data.tokenizer={tmp_path / 'tok'}", "data.max_utterances=8",
        "data.max_frames=20000", "data.cache_features=true", "train.epochs=1000", "train.max_steps=120",
        "train.lr=0.003", "train.scheduler=cosine", "train.warmup_steps=30", "train.keep_best=0", "train.keep_last=1",
        "train.precision=fp32", "train.log_interval=50",
    ])  # fmt: skip
    train(cfg, tmp_path / "asr")
    (tmp_path / "lm.txt").write_text("".join(r["text"] + "\n" for r in recs))
    (tmp_path / "held.txt").write_text("".join(r["text"] + "\n" for r in held))
    lm_cfg = LMExperimentConfig(
        LMConfig(type="transformer", d_model=64, heads=4, ffn_dim=128, layers=2, dropout=0.0),
        LMDataConfig(train=[str(tmp_path / "lm.txt")], tokenizer=str(tmp_path / "tok"), max_tokens=20000,
                     max_sentences=64),
        TrainConfig(epochs=240, lr=0.01, scheduler="cosine", warmup_steps=10, precision="fp32", checkpoint_interval=0,
                    keep_last=1, keep_best=0, log_interval=50),
    ).validate()
    train(lm_cfg, tmp_path / "lm", task=LMTask(lm_cfg))
    lm = load_lm(tmp_path / "lm")
    ppl = perplexity(lm, [tmp_path / "held.txt"])
    ppl8 = perplexity(lm, [tmp_path / "held.txt"], quantized=True)

    rec = load_model(tmp_path / "asr").use_lm(tmp_path / "lm")
    ds = ASRDataset(held, rec.tokenizer, rec.config.data, train=False)
    batch = collate([ds[i] for i in range(len(ds))])
    decode = rec.config.decode.updated(mode="attention", beam_size=10, ctc_weight=0.8)
    without = wer(rec, held, batch, decode.updated(lm_weight=0.0))
    with_lm = {w: wer(rec, held, batch, decode.updated(lm_weight=w)) for w in (1.0, 2.0)}
    int8 = {w: wer(rec, held, batch, decode.updated(lm_weight=w, quantize_lm=True)) for w in (1.0, 2.0)}
    print(f"\nreal speech, 8 held-out utterances (129 words): WER {without:.1f}% without LM, "
          + ", ".join(f"{v:.1f}% with LM weight {w}" for w, v in with_lm.items())
          + " (quantized LM: " + ", ".join(f"{v:.1f}%" for v in int8.values()) + ")"
          + f"; LM perplexity on their text {ppl.per_token:.3f}/char ({ppl8.per_token:.3f} quantized); "
          + f"{time.time() - t0:.0f} s")  # fmt: skip
    assert with_lm[2.0] < 0.6 * without and with_lm[1.0] < without
    assert int8[2.0] < 0.6 * without and int8[1.0] < without  # int8 products (--quantize-lm) keep the gain
