"""Learning sanity: the tiny config memorises 4 real LibriSpeech utterances (character vocabulary)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import soundfile as sf
import torch

from asr.config import load_config
from asr.data.cmvn import CMVNStats
from asr.decode import greedy_search
from asr.features.audio import fbank, load_audio
from asr.model import ASRModel

REPO = Path(__file__).resolve().parents[1]


def _librispeech(root, n):
    utts = []
    for trans in sorted(root.glob("LibriSpeech/*/*/*/*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(" ", 1)
            flac = trans.parent / f"{uid}.flac"
            utts.append((sf.info(str(flac)).duration, flac, text))
    return sorted(utts)[:n]


@pytest.mark.slow
def test_tiny_model_overfits_four_utterances(data_root):
    torch.manual_seed(0)
    utts = _librispeech(data_root, 4)
    feats = [fbank(load_audio(p)) for _, p, _ in utts]
    texts = [t for _, _, t in utts]
    chars = sorted(set("".join(texts)))
    vocab = ["<blank>", "<unk>", *chars, "<sos/eos>"]
    ids = {c: i for i, c in enumerate(vocab)}
    cfg = load_config(REPO / "configs" / "tiny.yaml", [f"model.vocab_size={len(vocab)}", "model.dropout=0.0"])
    model = ASRModel(cfg.model)
    model.cmvn.load_stats(*CMVNStats.from_features(feats).mean_istd())
    x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)  # (4, T, 80)
    x_lens = torch.tensor([f.shape[0] for f in feats])
    y = torch.nn.utils.rnn.pad_sequence([torch.tensor([ids[c] for c in t]) for t in texts], batch_first=True)
    y_lens = torch.tensor([len(t) for t in texts])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    start, hyps = time.monotonic(), []
    for step in range(1, 601):
        model.train()
        loss = model(x, x_lens, y, y_lens)["loss"]
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        if step % 50 == 0:
            model.eval()
            memory, mem_lens = model.encode(x, x_lens)
            hyps = ["".join(vocab[i] for i in h) for h in greedy_search(model, memory, mem_lens)]
            if hyps == texts:
                break
    elapsed = time.monotonic() - start
    print(f"overfit: {step} steps, {elapsed:.1f} s, loss {loss.item():.3f}")
    assert hyps == texts, f"after {step} steps: {hyps}"
