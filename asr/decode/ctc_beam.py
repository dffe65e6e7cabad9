"""CTC prefix beam search (frame-synchronous) and attention rescoring of its n-best, as in WeNet.

With a language model (``asr.lm``) both fuse it shallowly: the prefix search ranks a prefix by
``log P_ctc(prefix) + lm_weight * log p_lm(prefix)``, the LM applied per word piece as a prefix
grows (and to eos when the search ends); rescoring adds ``lm_weight * log p_lm(y, eos)``.
"""

from __future__ import annotations

import math

import torch

from asr.decode.beam_search import Hypothesis
from asr.decode.ctc_prefix_score import NEG_INF
from asr.model.asr_model import BLANK_ID

__all__ = [
    "ctc_prefix_beam_search", "attention_rescoring", "attention_log_probs", "lm_sequence_log_probs", "pad_tokens"
]


class _PrefixLM:
    """log p_lm(next token | prefix) for the prefixes a search holds, memoised: each new prefix costs
    one row of a batched full forward of ``[sos] + prefix`` (prefixes only grow, so rows repeat rarely)."""

    def __init__(self, lm):
        self.lm = lm
        self.dev = next(lm.parameters()).device
        self.next: dict[tuple[int, ...], list[float]] = {}
        self.total: dict[tuple[int, ...], float] = {(): 0.0}  # log p_lm(prefix)

    def prepare(self, prefixes) -> None:
        new = [p for p in prefixes if p not in self.next]
        if not new:
            return
        lens = torch.tensor([len(p) for p in new])
        x = torch.full((len(new), int(lens.max()) + 1), self.lm.sos_id, dtype=torch.long)  # (N, L + 1)
        for i, p in enumerate(new):
            x[i, 1 : len(p) + 1] = torch.tensor(p, dtype=torch.long)
        logits = self.lm(x.to(self.dev)).float()  # (N, L + 1, V)
        lp = torch.log_softmax(logits[torch.arange(len(new)), lens.to(self.dev)], dim=-1).cpu()  # (N, V)
        for p, row in zip(new, lp.tolist(), strict=True):
            self.next[p] = row

    def extend(self, prefix: tuple[int, ...], s: int) -> None:
        if prefix + (s,) not in self.total:
            self.total[prefix + (s,)] = self.total[prefix] + self.next[prefix][s]



def _logadd(a: float, b: float) -> float:
    """log(exp(a) + exp(b))."""
    if a < b:
        a, b = b, a
    if b == NEG_INF:
        return a
    return a + math.log(1.0 + math.exp(b - a))


def _add(table: dict[tuple[int, ...], list[float]], prefix: tuple[int, ...], pb: float, pnb: float) -> None:
    cur = table.get(prefix)
    if cur is None:
        table[prefix] = [pb, pnb]
    else:
        cur[0] = _logadd(cur[0], pb)
        cur[1] = _logadd(cur[1], pnb)


def _prefix_beam_one(lp: torch.Tensor, beam: int, plm: _PrefixLM | None = None, lm_weight: float = 0.0,
                     blank: int = BLANK_ID) -> list[Hypothesis]:  # fmt: skip
    """One utterance, log-probs (T, V): prefixes with (log p ending in blank, ending in non-blank)."""
    hyps: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, NEG_INF)}
    top_lp, top_ids = lp.topk(min(beam, lp.shape[1]), dim=-1)  # prune each frame to its `beam` best tokens

    def rank(kv) -> float:  # log P_ctc(prefix) [+ lm_weight log p_lm(prefix)]
        return _logadd(*kv[1]) + (lm_weight * plm.total[kv[0]] if plm is not None else 0.0)

    for frame_lp, frame_ids in zip(top_lp.tolist(), top_ids.tolist(), strict=True):
        nxt: dict[tuple[int, ...], list[float]] = {}
        if plm is not None:
            plm.prepare(hyps)
        for prefix, (pb, pnb) in hyps.items():
            last = prefix[-1] if prefix else None
            both = _logadd(pb, pnb)
            for p, s in zip(frame_lp, frame_ids, strict=True):
                if s == blank:
                    _add(nxt, prefix, both + p, NEG_INF)
                    continue
                if plm is not None:
                    plm.extend(prefix, s)
                if s == last:
                    _add(nxt, prefix, NEG_INF, pnb + p)  # repeat merged into the same token
                    _add(nxt, prefix + (s,), NEG_INF, pb + p)  # a blank separated the two: a new token
                else:
                    _add(nxt, prefix + (s,), NEG_INF, both + p)
        ranked = sorted(nxt.items(), key=rank, reverse=True)[:beam]
        hyps = {k: (v[0], v[1]) for k, v in ranked}
    if plm is None:
        return [Hypothesis(list(k), _logadd(*v)) for k, v in hyps.items()]
    plm.prepare(hyps)  # the sentence ends: log p_lm(eos | prefix) joins each score
    eos = plm.lm.eos_id
    out = [Hypothesis(list(k), _logadd(*v) + lm_weight * (plm.total[k] + plm.next[k][eos])) for k, v in hyps.items()]
    return sorted(out, key=lambda h: h.score, reverse=True)


@torch.inference_mode()
def ctc_prefix_beam_search(log_probs: torch.Tensor, lens: torch.Tensor, beam_size: int = 10, lm=None,
                           lm_weight: float = 0.0, blank: int = BLANK_ID) -> list[list[Hypothesis]]:  # fmt: skip
    """CTC prefix beam search over log-probs (B, T, V); the n-best of each utterance, best first,
    scored by log P_ctc(prefix) (all its alignments summed), plus ``lm_weight * log p_lm(prefix, eos)``
    with an LM (``lm_weight=0``: the LM is not run)."""
    lp = log_probs.float().cpu()
    use_lm = lm is not None and lm_weight != 0
    return [_prefix_beam_one(lp[i, : int(n)], beam_size, _PrefixLM(lm) if use_lm else None, lm_weight, blank)
            for i, n in enumerate(lens.tolist())]  # fmt: skip


def pad_tokens(seqs: list[list[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences as a zero-padded (N, max(1, U)) tensor and their lengths (N,)."""
    lens = torch.tensor([len(s) for s in seqs], dtype=torch.long, device=device)
    tokens = torch.zeros(len(seqs), max(1, int(lens.max())) if seqs else 1, dtype=torch.long, device=device)
    for j, s in enumerate(seqs):
        tokens[j, : len(s)] = torch.tensor(s, dtype=torch.long)
    return tokens, lens


@torch.inference_mode()
def lm_sequence_log_probs(lm, seqs: list[list[int]]) -> torch.Tensor:
    """log p_lm(y, eos) of each token sequence (no sos/eos in ``seqs``), one teacher-forced call, (N,)."""
    from asr.lm.model import IGNORE_ID, lm_io

    tokens, lens = pad_tokens(seqs, next(lm.parameters()).device)
    ys_in, ys_out = lm_io(tokens, lens, lm.eos_id)
    lp = torch.log_softmax(lm(ys_in).float(), dim=-1)  # (N, U + 1, V)
    valid = ys_out != IGNORE_ID
    return lp.gather(2, ys_out.clamp_min(0).unsqueeze(2)).squeeze(2).masked_fill(~valid, 0.0).sum(1)


@torch.inference_mode()
def attention_log_probs(
    model, memory: torch.Tensor, mem_lens: torch.Tensor, owner: list[int], seqs: list[list[int]]
) -> torch.Tensor:
    """log p_att(y, eos) of each sequence given the encoder output of utterance ``owner[j]``: all of
    them in one teacher-forced call of the decoder, (N,)."""
    tokens, token_lens = pad_tokens(seqs, memory.device)
    idx = torch.tensor(owner, dtype=torch.long, device=memory.device)
    ys_in, ys_out = model.decoder_io(tokens, token_lens)  # (N, U + 1) each; IGNORE_ID after eos
    lp = torch.log_softmax(model.decoder(ys_in, memory[idx], mem_lens[idx]).float(), dim=-1)  # (N, U + 1, V)
    valid = ys_out >= 0
    return lp.gather(2, ys_out.clamp_min(0).unsqueeze(2)).squeeze(2).masked_fill(~valid, 0.0).sum(1)


@torch.inference_mode()
def attention_rescoring(
    model,
    memory: torch.Tensor,
    mem_lens: torch.Tensor,
    nbest: list[list[Hypothesis]],
    ctc_weight: float = 0.3,
    length_bonus: float = 0.0,
    lm=None,
    lm_weight: float = 0.0,
) -> list[Hypothesis]:
    """Rescore each utterance's CTC n-best with the attention decoder, all hypotheses in one
    teacher-forced call: ``(1 - ctc_weight) * log p_att(y, eos) + ctc_weight * log p_ctc(y)``
    (+ ``lm_weight * log p_lm(y, eos)`` with an LM)."""
    if model.decoder is None:
        raise ValueError("attention_rescoring: the model has no attention decoder (decoder_layers=0)")
    owner = [i for i, hyps in enumerate(nbest) for _ in hyps]
    flat = [h for hyps in nbest for h in hyps]
    if not flat:
        return [Hypothesis([], NEG_INF) for _ in nbest]
    att = attention_log_probs(model, memory, mem_lens, owner, [h.tokens for h in flat])  # (H,)
    lm_lp = lm_sequence_log_probs(lm, [h.tokens for h in flat]).tolist() if lm is not None and lm_weight else None
    best: list[Hypothesis | None] = [None] * len(nbest)
    for j, h in enumerate(flat):
        s = (1 - ctc_weight) * float(att[j]) + ctc_weight * h.score + length_bonus * (len(h.tokens) + 1)
        if lm_lp is not None:
            s += lm_weight * lm_lp[j]
        i = owner[j]
        if best[i] is None or s > best[i].score:
            best[i] = Hypothesis(h.tokens, s)
    return [h if h is not None else Hypothesis([], NEG_INF) for h in best]
