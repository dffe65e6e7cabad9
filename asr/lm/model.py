"""Building an LM from its config, and the training objective the shared loop calls.

``build_lm`` is the one place that maps ``lm.type`` to a class. :class:`LMLoss` wraps an LM so that
``asr.training.train``'s loop can call ``model(tokens, token_lens)`` and get the dict of losses it expects
(DDP wraps this module, so the loss is computed inside ``forward``).
"""

from __future__ import annotations

import torch
from torch import nn

from asr.lm.config import LMConfig
from asr.lm.lstm_lm import LSTMLM
from asr.lm.transformer_lm import TransformerLM

__all__ = ["build_lm", "LMLoss", "lm_io", "IGNORE_ID"]

IGNORE_ID = -1


def build_lm(cfg: LMConfig) -> nn.Module:
    """A :class:`TransformerLM` or :class:`LSTMLM` (random weights) for ``cfg``."""
    if cfg.vocab_size < 3:
        raise ValueError(f"lm.vocab_size: expected >= 3 (blank, unk, sos/eos), got {cfg.vocab_size}")
    return TransformerLM(cfg) if cfg.type == "transformer" else LSTMLM(cfg)


def lm_io(tokens: torch.Tensor, token_lens: torch.Tensor, sos_eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ``[sos, y...]`` and target ``[y..., eos]`` (IGNORE_ID after eos), each (B, U + 1)."""
    b = tokens.shape[0]
    ys_in = torch.cat([tokens.new_full((b, 1), sos_eos), tokens], dim=1)
    pos = torch.arange(ys_in.shape[1], device=tokens.device).unsqueeze(0)
    ys_out = torch.cat([tokens, tokens.new_zeros(b, 1)], dim=1)
    ys_out = torch.where(pos == token_lens.unsqueeze(1), sos_eos, ys_out)
    ys_out = torch.where(pos > token_lens.unsqueeze(1), IGNORE_ID, ys_out)
    return ys_in, ys_out


class LMLoss(nn.Module):
    """Cross-entropy per predicted token (eos included) of the wrapped LM; ``self.lm`` is the LM."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, tokens: torch.Tensor, token_lens: torch.Tensor) -> dict[str, torch.Tensor]:
        """``loss``: mean negative log-likelihood per target token; ``nll``: its sum; ``acc``, ``num_tokens``."""
        ys_in, ys_out = lm_io(tokens, token_lens, self.lm.eos_id)
        logits = self.lm(ys_in).float()  # (B, U + 1, V)
        nll = nn.functional.cross_entropy(logits.flatten(0, 1), ys_out.flatten(), ignore_index=IGNORE_ID,
                                          reduction="sum")  # fmt: skip
        valid = ys_out != IGNORE_ID
        n = valid.sum()
        correct = ((logits.argmax(-1) == ys_out) & valid).sum()
        return {"loss": nll / n.clamp_min(1), "nll": nll.detach(), "num_tokens": n,
                "acc": correct.float() / n.clamp_min(1)}  # fmt: skip

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
