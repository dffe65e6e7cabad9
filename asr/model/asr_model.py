"""The attention encoder-decoder with a CTC head, and its training losses.

Token ids (shared with ``asr.text``): 0 is the CTC blank (also the pad value in token tensors,
never a target), 1 is <unk>, ``vocab_size - 1`` is <sos/eos>, which starts and ends every
decoder sequence. Padding is always described by lengths, never by a pad value.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .attention import lengths_to_keep_mask
from .cmvn import GlobalCMVN
from .fast import Linear
from .frontend import build_frontend
from .transformer import Decoder, Encoder

__all__ = ["ASRModel", "BLANK_ID", "UNK_ID", "IGNORE_ID"]

BLANK_ID = 0
UNK_ID = 1
IGNORE_ID = -1  # target value that the attention loss ignores


class ASRModel(nn.Module):
    """fbank (B, T, F) -> CMVN -> frontend -> encoder -> (CTC head, decoder)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.vocab_size < 3:
            raise ValueError(f"model.vocab_size: expected >= 3 (blank, unk, sos/eos), got {cfg.vocab_size}")
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.sos_id = self.eos_id = cfg.vocab_size - 1
        pre = cfg.norm == "pre"
        self.cmvn = GlobalCMVN(cfg.input_dim)
        self.frontend = build_frontend(
            cfg.frontend, cfg.input_dim, cfg.d_model, cfg.stack, cfg.conv_channels, cfg.conv_stack
        )
        self.encoder = Encoder(cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.encoder_layers, cfg.dropout, pre)
        self.ctc = Linear(cfg.d_model, cfg.vocab_size)
        self.decoder = (
            Decoder(cfg.vocab_size, cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.decoder_layers, cfg.dropout, pre)
            if cfg.decoder_layers > 0
            else None
        )

    @property
    def min_input_frames(self) -> int:
        return self.frontend.min_input_frames

    def encoder_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        return self.frontend.output_lengths(feat_lens)

    def encode(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder output (B, T', D) and its lengths (B,) for padded fbank features (B, T, F)."""
        x = self.cmvn(feats)
        if self.cfg.utterance_cmn:  # each utterance's mean over its real frames only, as ESPnet's UtteranceMVN
            keep = lengths_to_keep_mask(feat_lens, x.shape[1]).unsqueeze(-1)  # (B, T, 1)
            mean = (x * keep).sum(1, keepdim=True) / feat_lens.clamp_min(1).view(-1, 1, 1).to(x.dtype)
            x = x - mean
        x, lens = self.frontend(x, feat_lens)  # (B, T', D)
        return self.encoder(x, lens), lens

    def ctc_log_probs(self, memory: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.ctc(memory).float(), dim=-1)  # (B, T', V)

    def decoder_io(self, tokens: torch.Tensor, token_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder input [sos, y...] and target [y..., eos] (IGNORE_ID after eos), each (B, U + 1)."""
        b = tokens.shape[0]
        sos = tokens.new_full((b, 1), self.sos_id)
        ys_in = torch.cat([sos, tokens], dim=1)
        pos = torch.arange(ys_in.shape[1], device=tokens.device).unsqueeze(0)  # (1, U + 1)
        ys_out = torch.cat([tokens, tokens.new_zeros(b, 1)], dim=1)
        ys_out = torch.where(pos == token_lens.unsqueeze(1), self.eos_id, ys_out)
        ys_out = torch.where(pos > token_lens.unsqueeze(1), IGNORE_ID, ys_out)
        return ys_in, ys_out

    def forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, tokens: torch.Tensor, token_lens: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Losses for a batch: ``loss`` = (1 - ctc_weight) * att + ctc_weight * ctc, each summed over
        an utterance's tokens (frames for CTC) and averaged over the batch; ``acc`` is the
        decoder's token accuracy (eos included); ``num_tokens`` counts its targets."""
        memory, mem_lens = self.encode(feats, feat_lens)
        b = feats.shape[0]
        w = self.cfg.ctc_weight
        out: dict[str, torch.Tensor] = {}
        zero = memory.new_zeros((), dtype=torch.float32)
        loss_ctc = loss_att = zero
        if w > 0:
            lp = self.ctc_log_probs(memory).transpose(0, 1)  # (T', B, V)
            target_keep = lengths_to_keep_mask(token_lens, tokens.shape[1])
            loss_ctc = F.ctc_loss(
                lp, tokens[target_keep], mem_lens, token_lens, blank=BLANK_ID, reduction="sum", zero_infinity=True
            ) / b
        if w < 1 and self.decoder is not None:
            ys_in, ys_out = self.decoder_io(tokens, token_lens)
            logits = self.decoder(ys_in, memory, mem_lens).float()  # (B, U + 1, V)
            loss_att = F.cross_entropy(
                logits.flatten(0, 1),
                ys_out.flatten(),
                ignore_index=IGNORE_ID,
                label_smoothing=self.cfg.label_smoothing,
                reduction="sum",
            ) / b
            valid = ys_out != IGNORE_ID
            out["num_tokens"] = valid.sum()
            out["acc"] = ((logits.argmax(-1) == ys_out) & valid).sum() / valid.sum().clamp_min(1)
        out["loss_ctc"] = loss_ctc.detach()
        out["loss_att"] = loss_att.detach()
        out["loss"] = (1 - w) * loss_att + w * loss_ctc
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
