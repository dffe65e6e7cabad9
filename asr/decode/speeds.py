"""A test-time ensemble over playback speeds, combined on hypotheses (``decode.speeds``).

Each utterance is heard several times: its audio played at each speed of ``decode.speeds``
(resampled, pitch too, as training's speed perturbation), each a *view* with its own features.
Every view is searched as ``decode.mode`` says and gives its n-best (``beam_size`` of them; one
for ``ctc_greedy``); the hypotheses of all views are pooled, each pooled hypothesis is scored
whole in every view, and the best mean score wins:

    mean over views of  (1 - ctc_weight) * log p_att(y, eos) + ctc_weight * log p_ctc(y)   attention, rescore
                        log p_ctc(y)                                                        ctc_greedy, ctc_beam
    + length_bonus * (len(y) + 1) [with a decoder]  + lm_weight * log p_lm(y, eos) [with an LM]

log p_ctc sums all alignments (the CTC forward algorithm), log p_att is the decoder's, teacher
forced: no beam or prefix approximations in the choice. The views are combined on hypotheses,
not on frame posteriors (their frames do not line up: each speed has its own number of them).
With one view the choice is the search's own best. ``length_norm`` ranks within each view's
search only; the pooled choice is by the scores above.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from asr.config import DecodeConfig
from asr.decode.beam_search import Hypothesis, beam_search
from asr.decode.ctc_beam import attention_log_probs, ctc_prefix_beam_search, lm_sequence_log_probs, pad_tokens
from asr.decode.greedy import ctc_greedy_search
from asr.decode.search import check_mode
from asr.hardware import autocast, resolve_precision

__all__ = ["recognize_views"]

View = tuple[list[str], torch.Tensor, torch.Tensor]  # utterance ids (B,), fbank (B, T, F), lengths (B,)


@torch.inference_mode()
def recognize_views(model, views: list[View], cfg: DecodeConfig, lm=None) -> dict[str, Hypothesis]:
    """The best hypothesis of each utterance over its views (see the module docstring).

    An utterance may be missing from some views (too short at a high speed, say): it is scored in
    the views that have it. Returns ``{id: Hypothesis}`` with the mean score.
    """
    check_mode(model, cfg)
    dev = next(model.parameters()).device
    with autocast(resolve_precision(cfg.precision, dev, "decode.precision"), dev):
        encoded = []
        pool: dict[str, dict[tuple[int, ...], None]] = {}  # an ordered set of candidates per utterance
        for ids, feats, lens in views:
            memory, mem_lens = model.encode(feats.to(dev), lens.to(dev))
            lp = model.ctc_log_probs(memory).float()
            encoded.append((ids, memory, mem_lens, lp))
            for uid, hyps in zip(ids, _nbest(model, memory, mem_lens, lp, cfg, lm), strict=True):
                pool.setdefault(uid, {}).update(dict.fromkeys(tuple(h.tokens) for h in hyps))
        total = {uid: torch.zeros(len(c)) for uid, c in pool.items()}
        seen = dict.fromkeys(pool, 0)
        for ids, memory, mem_lens, lp in encoded:
            owner = [i for i, uid in enumerate(ids) for _ in pool[uid]]
            seqs = [list(t) for uid in ids for t in pool[uid]]
            scores = _scores(model, memory, mem_lens, lp, owner, seqs, cfg).cpu()
            start = 0
            for uid in ids:
                n = len(pool[uid])
                total[uid] += scores[start : start + n]
                seen[uid] += 1
                start += n
    best = {}
    for uid, cands in pool.items():
        seqs = list(cands)
        score = total[uid] / seen[uid]
        score += _extra(seqs, cfg, lm, with_decoder=cfg.mode in ("attention", "rescore"))
        j = int(score.argmax())
        best[uid] = Hypothesis(list(seqs[j]), float(score[j]))
    return best


def _nbest(model, memory, mem_lens, lp, cfg: DecodeConfig, lm) -> list[list[Hypothesis]]:
    """The candidates one view contributes: the n-best of ``cfg.mode``'s search."""
    if cfg.mode == "attention":
        return beam_search(model, memory, mem_lens, beam_size=cfg.beam_size, ctc_weight=cfg.ctc_weight,
                           ctc_log_probs=lp, length_bonus=cfg.length_bonus, length_norm=cfg.length_norm,
                           max_len_ratio=cfg.max_len_ratio, nbest=cfg.beam_size, lm=lm,
                           lm_weight=cfg.lm_weight, rules=cfg.rules)  # fmt: skip
    if cfg.mode == "ctc_greedy":
        return [[Hypothesis(t, 0.0)] for t in ctc_greedy_search(lp, mem_lens, model.blank_id)]
    fuse = cfg.mode == "ctc_beam"  # rescore: the LM scores the pooled n-best, not the prefix search
    return ctc_prefix_beam_search(lp, mem_lens, cfg.beam_size, lm if fuse else None, cfg.lm_weight if fuse else 0.0,
                                  model.blank_id)


def _scores(model, memory, mem_lens, lp, owner: list[int], seqs: list[list[int]], cfg: DecodeConfig) -> torch.Tensor:
    """The view's score of each sequence (``owner[j]``: its utterance in the view's batch), (N,)."""
    dev = lp.device
    tokens, token_lens = pad_tokens(seqs, dev)
    idx = torch.tensor(owner, dtype=torch.long, device=dev)
    ctc = -F.ctc_loss(lp[idx].transpose(0, 1), tokens, mem_lens[idx], token_lens, blank=model.blank_id,
                      reduction="none", zero_infinity=False)  # fmt: skip  (-inf: more tokens than frames allow)
    if cfg.mode in ("ctc_greedy", "ctc_beam"):
        return ctc
    att = attention_log_probs(model, memory, mem_lens, owner, seqs)
    return (1 - cfg.ctc_weight) * att + cfg.ctc_weight * ctc


def _extra(seqs: list[tuple[int, ...]], cfg: DecodeConfig, lm, with_decoder: bool) -> torch.Tensor:
    """What does not depend on the view: the length bonus (with a decoder) and the LM's score."""
    out = torch.zeros(len(seqs))
    if with_decoder and cfg.length_bonus:
        out += cfg.length_bonus * torch.tensor([len(s) + 1 for s in seqs], dtype=torch.float)
    if lm is not None and cfg.lm_weight:
        out += cfg.lm_weight * lm_sequence_log_probs(lm, [list(s) for s in seqs]).float().cpu()
    return out
