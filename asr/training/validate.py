"""Validation during training: dev loss and token accuracy each epoch, and greedy WER if asked.

The numbers are summed over ranks, so every process gets the same metrics (they pick the best
checkpoints). WER counts words with ``asr.scoring``'s edit distance, as ``asr score`` does.
"""

from __future__ import annotations

import torch

from asr.config import Config
from asr.decode import greedy_search
from asr.hardware import autocast
from asr.scoring import edit_distance
from asr.text import normalize
from asr.training.runtime import DistEnv, all_reduce

__all__ = ["validate", "word_errors"]


def word_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(edit distance in words, reference words) of two normalised transcripts."""
    r = ref.split()
    return edit_distance(r, hyp.split()), len(r)


@torch.no_grad()
def validate(model, loader, records_by_id, tokenizer, cfg: Config, env: DistEnv, precision: str) -> dict[str, float]:
    """Dev loss (per utterance, as in training), token accuracy, greedy WER; summed over ranks."""
    model.eval()
    loss_sum = utts = correct = tokens = errors = words = 0.0
    for batch in loader:
        if batch.feats.shape[0] == 0:
            continue
        feats, feat_lens = batch.feats.to(env.device), batch.feat_lens.to(env.device)
        toks, tok_lens = batch.tokens.to(env.device), batch.token_lens.to(env.device)
        with autocast(precision, env.device):
            out = model(feats, feat_lens, toks, tok_lens)
            b = feats.shape[0]
            loss_sum += float(out["loss"]) * b
            utts += b
            if "num_tokens" in out:
                correct += float(out["acc"]) * float(out["num_tokens"])
                tokens += float(out["num_tokens"])
            if cfg.train.dev_wer and model.decoder is not None:
                memory, mem_lens = model.encode(feats, feat_lens)
                hyps = greedy_search(model, memory, mem_lens, max_len_ratio=cfg.decode.max_len_ratio)
                for uid, hyp in zip(batch.ids, hyps, strict=True):
                    ref = normalize(records_by_id[uid]["text"], cfg.data.normalizer)
                    e, n = word_errors(ref, normalize(tokenizer.decode(hyp), cfg.data.normalizer))
                    errors += e
                    words += n
    loss_sum, utts, correct, tokens, errors, words = all_reduce([loss_sum, utts, correct, tokens, errors, words], env)
    model.train()
    metrics = {"dev_loss": loss_sum / max(utts, 1), "dev_acc": correct / max(tokens, 1)}
    if cfg.train.dev_wer and words > 0:
        metrics["dev_wer"] = 100.0 * errors / words
    return metrics
