"""A tiny model that has learnt a synthetic task, so that search tests see non-trivial hypotheses.

Random weights give near-constant decoders (every utterance decodes to the same token repeated),
which would let wrong search code pass. A few hundred Adam steps on "speech" made of per-token
feature prototypes give a model whose outputs depend on the input, are peaky but not certain,
and end at varying lengths.
"""

from __future__ import annotations

from pathlib import Path

import torch

from asr.config import Config, load_config
from asr.model import ASRModel

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def synthetic_batch(
    n: int, vocab: int, g: torch.Generator, protos: torch.Tensor, max_tokens: int = 8
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Utterances of 1..max_tokens tokens (ids 1..vocab-2), each token 6-14 noisy frames of its prototype."""
    seqs, frames = [], []
    for _ in range(n):
        k = int(torch.randint(1, max_tokens + 1, (1,), generator=g))
        toks = torch.randint(1, vocab - 1, (k,), generator=g)
        parts = [torch.randn(int(torch.randint(4, 10, (1,), generator=g)), 80, generator=g) * 0.3]
        for t in toks.tolist():
            d = int(torch.randint(6, 15, (1,), generator=g))
            parts.append(protos[t] + 0.8 * torch.randn(d, 80, generator=g))
        seqs.append(toks)
        frames.append(torch.cat(parts))
    feat_lens = torch.tensor([f.shape[0] for f in frames])
    feats = torch.zeros(n, int(feat_lens.max()), 80)
    for i, f in enumerate(frames):
        feats[i, : f.shape[0]] = f
    token_lens = torch.tensor([len(s) for s in seqs])
    tokens = torch.zeros(n, int(token_lens.max()), dtype=torch.long)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = s
    return feats, feat_lens, tokens, token_lens


def trained_tiny_model(vocab: int = 12, steps: int = 120, seed: int = 0) -> tuple[ASRModel, Config, torch.Tensor]:
    """The tiny config trained briefly on the synthetic task; returns (model in eval mode, config, prototypes)."""
    cfg = load_config(CONFIGS / "tiny.yaml", [f"model.vocab_size={vocab}", "model.dropout=0.0"])
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(vocab, 80, generator=g)
    model = ASRModel(cfg.model)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        feats, feat_lens, tokens, token_lens = synthetic_batch(16, vocab, g, protos)
        loss = model(feats, feat_lens, tokens, token_lens)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), cfg, protos


def librispeech_records(data_root: Path) -> list[dict]:
    """Manifest records (id, audio, duration, text) of the LibriSpeech utterances in the test data."""
    from asr.features.audio import audio_duration

    records = []
    for trans in sorted((data_root / "LibriSpeech").rglob("*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(maxsplit=1)
            audio = trans.parent / f"{uid}.flac"
            records.append({"id": uid, "audio": str(audio), "duration": audio_duration(audio), "text": text})
    return records


def make_model_dir(out: Path, data_root: Path, seed: int = 0, overrides: list[str] | None = None) -> Path:
    """A model directory: the tiny config, a char tokenizer trained on the LibriSpeech transcripts,
    random weights with a sharpened CTC head (so CTC outputs are peaky and texts non-empty)."""
    from asr.checkpoint import save_model_dir
    from asr.text import Tokenizer, normalize

    texts = [normalize(r["text"]) for r in librispeech_records(data_root)]
    tok = Tokenizer.train(texts, out / "tok", None, "char")
    cfg = load_config(CONFIGS / "tiny.yaml", [f"model.vocab_size={tok.vocab_size}", *(overrides or [])])
    torch.manual_seed(seed)
    model = ASRModel(cfg.model)
    with torch.no_grad():
        model.ctc.weight.mul_(4.0)
    return save_model_dir(out / "model", cfg, model.state_dict(), tokenizer_model=tok.model_path)
