"""The attention encoder-decoder with a CTC head, and its training losses.

Token ids (shared with ``asr.text``): 0 is the CTC blank (also the pad value in token tensors,
never a target), 1 is <unk>, ``vocab_size - 1`` is <sos/eos>, which starts and ends every
decoder sequence. Padding is always described by lengths, never by a pad value.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from asr.config import ModelConfig
from asr.model.attention import lengths_to_keep_mask
from asr.model.cmvn import GlobalCMVN
from asr.model.fast import Linear
from asr.model.frontend import build_frontend
from asr.model.transformer import Decoder, Encoder

__all__ = ["ASRModel", "BLANK_ID", "UNK_ID", "IGNORE_ID", "kl_label_smoothing"]

BLANK_ID = 0
UNK_ID = 1
IGNORE_ID = -1  # target value that the attention loss ignores


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """Losses in float32 under bf16/fp16 autocast; a float64 model (the ESPnet float64 check) stays float64."""
    return x if x.dtype == torch.float64 else x.float()


def kl_label_smoothing(logits: torch.Tensor, target: torch.Tensor, eps: float) -> torch.Tensor:
    """ESPnet's label-smoothed loss, summed over targets that are not IGNORE_ID: logits (N, V), target (N,).

    The smoothed target puts 1 - eps on the label and eps / (V - 1) on every other class (PyTorch's
    puts eps / V on all, the label included), and the loss is the KL divergence from it, i.e. the
    cross-entropy minus the target's entropy: a constant that moves the loss, not its gradient.
    """
    keep = target != IGNORE_ID
    lp = F.log_softmax(logits[keep], dim=-1)  # (N', V)
    t = target[keep]
    v = lp.shape[-1]
    conf, other = lp.new_tensor(1.0 - eps), lp.new_tensor(eps / (v - 1))  # in the logits' precision
    lp_t = lp.gather(1, t.unsqueeze(1)).squeeze(1)  # (N',)
    cross = -(conf * lp_t + other * (lp.sum(-1) - lp_t))
    entropy = -(torch.xlogy(conf, conf) + (v - 1) * torch.xlogy(other, other))
    return (cross - entropy).sum()


class ASRModel(nn.Module):
    """fbank (B, T, F) -> CMVN -> frontend -> encoder -> (CTC head, decoder)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.vocab_size < 3:
            raise ValueError(f"model.vocab_size: expected >= 3 (blank, unk, sos/eos), got {cfg.vocab_size}")
        self.cfg = cfg
        self.vocab_size = cfg.vocab_size
        self.sos_id = cfg.vocab_size - 1 if cfg.sos_id < 0 else cfg.sos_id
        self.eos_id = cfg.vocab_size - 1 if cfg.eos_id < 0 else cfg.eos_id
        self.blank_id = cfg.blank_id
        self.start_tokens = list(cfg.prompt) or [self.sos_id]  # what the decoder reads before the output
        pre = cfg.norm == "pre"
        whisper = cfg.positions == "whisper"
        self.cmvn = GlobalCMVN(cfg.input_dim)
        self.espnet_padding = cfg.padding == "espnet"
        self.frontend = build_frontend(
            cfg.frontend, cfg.input_dim, cfg.d_model, cfg.stack, cfg.conv_channels, cfg.conv_stack, cfg.dropout,
            self.espnet_padding,
        )
        eps = cfg.layer_norm_eps
        self.encoder = Encoder(
            cfg.d_model, cfg.heads, cfg.ffn_dim, cfg.encoder_layers, cfg.dropout, pre, eps, cfg.activation,
            cfg.max_source_len if whisper else 0,
        )
        self.ctc = Linear(cfg.d_model, cfg.vocab_size) if cfg.ctc_head else None
        if self.ctc is not None and cfg.ctc_blank_bias:
            with torch.no_grad():
                self.ctc.bias[cfg.blank_id] = cfg.ctc_blank_bias
        self.decoder = (
            Decoder(
                cfg.vocab_size, cfg.d_model, cfg.decoder_heads or cfg.heads, cfg.decoder_ffn_dim or cfg.ffn_dim,
                cfg.decoder_layers, cfg.dropout, pre, eps, cfg.tie_output, cfg.activation,
                cfg.max_target_len if whisper else 0,
            )
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
        if self.espnet_padding or self.cfg.utterance_cmn:
            keep = lengths_to_keep_mask(feat_lens, x.shape[1]).unsqueeze(-1)  # (B, T, 1)
            if self.espnet_padding:  # ESPnet's GlobalMVN zeroes padded frames; its frontend then reads them
                x = x * keep
            if self.cfg.utterance_cmn:
                x = self._utterance_mvn(x, feat_lens, keep)
        x, lens = self.frontend(x, feat_lens)  # (B, T', D)
        return self.encoder(x, lens), lens

    def _utterance_mvn(self, x: torch.Tensor, lens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Each utterance's mean (and with ``utterance_cvn`` its standard deviation) over its real frames
        removed, as ESPnet's UtteranceMVN. With ``padding: espnet`` the variance is ESPnet's exactly:
        its sum also runs over padded frames, which hold -mean there (equal for a batch of one)."""
        n = lens.clamp_min(1).view(-1, 1, 1).to(x.dtype)  # (B, 1, 1)
        x = x - (x * keep).sum(1, keepdim=True) / n
        if self.cfg.utterance_cvn:
            sq = x.square() if self.espnet_padding else x.square() * keep
            x = x / (sq.sum(1, keepdim=True) / n).sqrt().clamp_min(1e-20)
        return x

    def ctc_log_probs(self, memory: torch.Tensor) -> torch.Tensor:
        if self.ctc is None:
            raise ValueError("the model has no CTC head (model.ctc_head is false): decode with mode attention, "
                             "ctc_weight 0")
        return F.log_softmax(_at_least_fp32(self.ctc(memory)), dim=-1)  # (B, T', V)

    def decoder_io(self, tokens: torch.Tensor, token_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder input [sos, y...] and target [y..., eos] (IGNORE_ID after eos), each (B, U + 1).

        With a prompt (``model.prompt``, Whisper's start-of-transcript sequence) the input is
        [prompt, y...] and the target [IGNORE_ID x (P - 1), y..., eos], each (B, P + U): the prompt
        is given, never predicted, so only the transcript and its end are learnt."""
        b = tokens.shape[0]
        prompt = self.start_tokens
        ys_in = torch.cat([tokens.new_tensor(prompt).expand(b, -1), tokens], dim=1)
        pos = torch.arange(tokens.shape[1] + 1, device=tokens.device).unsqueeze(0)  # (1, U + 1)
        ys_out = torch.cat([tokens, tokens.new_zeros(b, 1)], dim=1)
        ys_out = torch.where(pos == token_lens.unsqueeze(1), self.eos_id, ys_out)
        ys_out = torch.where(pos > token_lens.unsqueeze(1), IGNORE_ID, ys_out)
        if len(prompt) > 1:
            ys_out = torch.cat([ys_out.new_full((b, len(prompt) - 1), IGNORE_ID), ys_out], dim=1)
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
                lp, tokens[target_keep], mem_lens, token_lens, blank=self.blank_id, reduction="sum", zero_infinity=True
            ) / b
        if w < 1 and self.decoder is not None:
            ys_in, ys_out = self.decoder_io(tokens, token_lens)
            logits = _at_least_fp32(self.decoder(ys_in, memory, mem_lens))  # (B, U + 1, V)
            if self.cfg.label_smoothing_mode == "espnet":
                loss_att = kl_label_smoothing(logits.flatten(0, 1), ys_out.flatten(), self.cfg.label_smoothing) / b
            else:
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
