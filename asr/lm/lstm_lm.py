"""An LSTM language model over the ASR model's SentencePiece ids (ESPnet's RNN LM in shape):
embedding, a stack of LSTM layers, dropout, output layer; ``<sos/eos>`` at both ends."""

from __future__ import annotations

import torch
from torch import nn

from asr.lm.cache import LMCache
from asr.lm.config import LMConfig

__all__ = ["LSTMLM"]


class LSTMLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.sos_id = self.eos_id = cfg.vocab_size - 1
        d, e = cfg.d_model, cfg.embed_dim or cfg.d_model  # hidden size, embedding (input) size
        self.embed = nn.Embedding(cfg.vocab_size, e)
        self.dropout = nn.Dropout(cfg.dropout)
        self.rnn = nn.LSTM(e, d, cfg.layers, batch_first=True, dropout=cfg.dropout if cfg.layers > 1 else 0.0)
        self.output = None if cfg.tie_output else nn.Linear(d, cfg.vocab_size)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        h = self.dropout(h)
        return nn.functional.linear(h, self.embed.weight) if self.output is None else self.output(h)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, U, V) of the next token after each prefix of ``tokens`` (B, U)."""
        h, _ = self.rnn(self.dropout(self.embed(tokens)))  # (B, U, D)
        return self._logits(h)

    def init_cache(self, n: int, device: torch.device | None = None) -> LMCache:
        """Zero hidden and cell states of ``n`` hypotheses, (layers, N, D) each."""
        z = torch.zeros(self.cfg.layers, n, self.cfg.d_model, device=device)
        return LMCache((z, z.clone()), dim=1)

    def step(self, tokens: torch.Tensor, cache: LMCache) -> tuple[torch.Tensor, LMCache]:
        """Log-probabilities (N, V) of the token after ``tokens`` (N,); the states move one token on."""
        h0, c0 = cache.tensors
        h, (h1, c1) = self.rnn(self.dropout(self.embed(tokens.unsqueeze(1))), (h0, c0))
        return torch.log_softmax(self._logits(h[:, 0]).float(), dim=-1), LMCache((h1, c1), dim=1)
