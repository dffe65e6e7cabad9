"""One entry point from features to hypotheses, choosing the search by ``DecodeConfig.mode``."""

from __future__ import annotations

import torch

from asr.config import DecodeConfig
from asr.decode.beam_search import Hypothesis, beam_search
from asr.decode.ctc_beam import attention_rescoring, ctc_prefix_beam_search
from asr.decode.greedy import ctc_greedy_search
from asr.decode.whisper import WhisperPrompt
from asr.hardware import autocast, resolve_precision

__all__ = ["recognize", "check_mode"]


@torch.inference_mode()
def recognize(
    model, feats: torch.Tensor, feat_lens: torch.Tensor, cfg: DecodeConfig | None = None, lm=None, tokenizer=None
) -> list[Hypothesis]:
    """Best hypothesis for each utterance of a padded fbank batch (B, T, F) with lengths (B,).

    Modes: ``attention`` (batched beam search, joint with CTC when ``ctc_weight`` > 0; beam 1
    is greedy), ``ctc_greedy``, ``ctc_beam`` (CTC prefix beam search) and ``rescore`` (the CTC
    n-best rescored by the attention decoder). ``cfg.precision`` follows the training rule
    (``asr.hardware``): bf16 autocast only where asked for, or ``auto`` on hardware with native bf16.
    ``lm``: a language model network (``asr.lm``) fused with ``cfg.lm_weight`` in every mode but
    ``ctc_greedy``; in ``rescore`` it scores the CTC n-best (found without it). Rules ``whisper`` need
    the model's ``tokenizer`` (``asr.whisper_text.WhisperTokenizer``): the prompt and the suppressed tokens.
    """
    cfg = cfg or DecodeConfig()
    dev = next(model.parameters()).device
    with autocast(resolve_precision(cfg.precision, dev, "decode.precision"), dev):
        return _recognize(model, feats.to(dev), feat_lens.to(dev), cfg, lm, tokenizer)


def _recognize(model, feats: torch.Tensor, feat_lens: torch.Tensor, cfg: DecodeConfig, lm, tokenizer
               ) -> list[Hypothesis]:
    check_mode(model, cfg)  # before the encoder runs
    dev = feats.device
    memory, mem_lens = model.encode(feats, feat_lens)  # (B, S, D), (B,)
    if cfg.mode == "attention":
        prompt = None
        if cfg.rules == "whisper":  # the prompt (language detected where not given) and Whisper's filters
            if not hasattr(tokenizer, "timestamp_begin"):
                raise ValueError("decode.rules=whisper needs the model's Whisper tokenizer (its tokenizer.json)")
            prompt = WhisperPrompt.build(model, memory, mem_lens, tokenizer, cfg.language, cfg.task, cfg.timestamps)
        nbest = beam_search(
            model,
            memory,
            mem_lens,
            beam_size=cfg.beam_size,
            ctc_weight=cfg.ctc_weight if model.ctc is not None else 0.0,  # no CTC head (an imported Whisper): none
            length_bonus=cfg.length_bonus,
            length_norm=cfg.length_norm,
            max_len=model.cfg.max_target_len // 2 if prompt is not None else None,  # Whisper's sample_len
            max_len_ratio=cfg.max_len_ratio,
            lm=lm,
            lm_weight=cfg.lm_weight,
            rules=cfg.rules,
            prompt=prompt,
            patience=cfg.patience,
        )
        return [h[0] for h in nbest]
    lp = model.ctc_log_probs(memory)  # (B, S, V)
    if cfg.mode == "ctc_greedy":
        ids = ctc_greedy_search(lp, mem_lens, model.blank_id)
        keep = torch.arange(lp.shape[1], device=dev) < mem_lens.unsqueeze(1)
        path = (lp.max(-1).values * keep).sum(1)  # log-prob of the best path, (B,)
        return [Hypothesis(t, float(s)) for t, s in zip(ids, path.tolist(), strict=True)]
    if cfg.mode == "ctc_beam":
        return [h[0] for h in ctc_prefix_beam_search(lp, mem_lens, cfg.beam_size, lm, cfg.lm_weight, model.blank_id)]
    nbest = ctc_prefix_beam_search(lp, mem_lens, cfg.beam_size, blank=model.blank_id)
    if cfg.mode == "rescore":
        return attention_rescoring(model, memory, mem_lens, nbest, cfg.ctc_weight, cfg.length_bonus, lm, cfg.lm_weight)
    raise ValueError(f"decode.mode: expected 'attention', 'ctc_greedy', 'ctc_beam' or 'rescore', got {cfg.mode!r}")


def check_mode(model, cfg: DecodeConfig) -> None:
    """A clear error where ``cfg.mode`` needs the decoder the model does not have."""
    if cfg.mode == "attention" and (model.decoder is None or cfg.ctc_weight >= 1.0):
        raise ValueError("decode.mode=attention needs a decoder and ctc_weight < 1; use mode ctc_beam or ctc_greedy")
    if cfg.mode == "rescore" and model.decoder is None:
        raise ValueError("decode.mode=rescore needs a decoder (decoder_layers > 0); use mode ctc_beam or ctc_greedy")
