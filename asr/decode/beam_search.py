"""Beam search over a batch of utterances: all B x beam hypotheses advance in one decoder call.

Joint CTC/attention scoring (Watanabe et al. 2017): a candidate's score is
``(1 - ctc_weight) * log p_att + ctc_weight * (log psi(h + c) - log psi(h))`` plus a length bonus
per token. With CTC, only the ``pre_beam`` best tokens of the decoder (and eos) get CTC prefix
scores, as in ESPnet (blank and eos take places among them there too); ``pre_beam=0`` scores the
whole vocabulary.

Shallow fusion with a language model (``asr.lm``) adds ``lm_weight * log p_lm`` per token (eos
included). The LM steps once per search step over all B x W rows, like the decoder, and its cache
is reordered with the beams exactly as the decoder's self-attention cache is. With an LM, the
pre-beam ranks tokens by ``(1 - ctc_weight) log p_att + lm_weight log p_lm`` (ESPnet's "full"
scores). ``lm_weight=0`` does not run the LM at all: the search is the one without an LM.

Which candidates get CTC scores, which of the best continue and when an utterance stops are the
search's rules (``asr.decode.rules``: ``asr``, fairseq's ranking, or ``espnet``, ESPnet's
``BatchBeamSearch``); the loop is the same for both. Stopped utterances leave the batch; each
utterance's decisions depend on its own rows only, so a result does not depend on the batch it
was decoded in. The first step runs one row per utterance (its W hypotheses are still one: sos),
whose scores stand for all W; the beams branch from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from asr.decode.ctc_prefix_score import CTCPrefixScorer, CTCPrefixState
from asr.decode.greedy import max_lengths
from asr.decode.rules import end_detected, get_rules
from asr.decode.whisper import WhisperPrompt, filter_logits
from asr.lm.cache import LMCache
from asr.model.asr_model import BLANK_ID
from asr.model.kv_cache import KVCache
from asr.model.transformer import DecoderCache

__all__ = ["Hypothesis", "beam_search"]


@dataclass
class Hypothesis:
    """A finished hypothesis: token ids (no sos/eos) and its score (higher is better).

    ``score`` is the sum of the step scores (length bonus included); with length normalisation
    hypotheses are ranked by ``score / (len(tokens) + 1)``, which is then stored in ``score``.
    Under Whisper's rules ``score`` is the sum of log-probabilities (eos included where the
    hypothesis ended with it) and ``language`` the prompt's language.
    """

    tokens: list[int]
    score: float
    language: str | None = None


@dataclass
class _Beams:
    """The utterances still searching and their W hypotheses each; rows are utterance-major
    (row ``i * W + j`` is hypothesis j of live utterance i)."""

    utts: torch.Tensor  # (B,) position of each live utterance in the input batch
    limits: torch.Tensor  # (B,) longest output allowed
    scores: torch.Tensor  # (B, W) running scores; -inf marks an empty slot
    seqs: torch.Tensor  # (B*W, step) tokens so far
    tokens: torch.Tensor  # (B*W,) newest token of each hypothesis (sos at the start)
    cache: DecoderCache  # self-attention K/V per row; cross-attention K/V per utterance
    ctc: CTCPrefixState | None  # CTC prefix state per row
    lm_cache: LMCache | KVCache | None = None  # the fused LM's state per row

    def advance(self, parent, tokens, scores, ctc, keep=None, state_parent=None) -> None:
        """Rows ``parent`` (B*W,) extended by ``tokens`` (B*W,), with their new scores (B, W); with
        ``keep`` (B',), only those live utterances stay, and ``parent``, ``tokens``, ``scores`` and
        ``ctc`` are theirs alone (B'*W rows): each cache moves once, and only the rows that go on.
        ``state_parent``: the parents' rows in the caches, where those differ from ``parent`` (before
        the first step they hold one row per utterance)."""
        self.scores, self.tokens = scores, tokens
        self.seqs = torch.cat([self.seqs[parent], tokens.unsqueeze(1)], dim=1)
        state_parent = parent if state_parent is None else state_parent
        if keep is None:
            self.cache = self.cache.reorder_self(state_parent)
        else:
            self.utts, self.limits = self.utts[keep], self.limits[keep]
            self.cache = self.cache.index_select(state_parent, cross_index=keep)
        self.ctc = ctc
        if self.lm_cache is not None:
            self.lm_cache = self.lm_cache.index_select(state_parent)


def _joint_scores(att, scorer, state, ctc_weight: float, k_pre: int, eos: int, lm=None, lm_weight: float = 0.0,
                  blank: int = BLANK_ID):
    """Step scores of the candidates of each row: (scores (N, K), ids (N, K) or None for the whole
    vocabulary, CTC log psi (N, K) or None). With CTC the candidates are the ``k_pre`` best tokens
    of the decoder (with an LM: of the fused decoder + LM score), blank and eos among those ranked
    as in ESPnet, plus eos; ``(1 - w) log p_att + w (log psi(h + c) - log psi(h)) [+ lm_weight
    log p_lm]``, -inf for blank (it has no prefix score) and for eos where the pre-beam ranked it
    (the one added after it stands for it)."""
    if scorer is None:
        return (att, None, None) if lm is None else (att + lm_weight * lm, None, None)
    n, v = att.shape
    if k_pre >= v:
        ids = torch.arange(v, device=att.device).expand(n, v)
    else:
        pre = att if lm is None else (1 - ctc_weight) * att + lm_weight * lm
        pre_ids = pre.topk(k_pre, dim=-1).indices
        ids = torch.cat([pre_ids, torch.full_like(pre_ids[:, :1], eos)], dim=1)  # (N, K)
    psi = scorer.score(state, ids)  # (N, K) float64
    ctc = (psi - state.psi.unsqueeze(1)).float().nan_to_num(nan=-math.inf)
    joint = (1 - ctc_weight) * att.gather(1, ids) + ctc_weight * ctc
    dup = (ids == eos) & (torch.arange(ids.shape[1], device=ids.device) < ids.shape[1] - 1)
    joint = joint.masked_fill((ids == blank) | dup, -math.inf)
    return (joint, ids, psi) if lm is None else (joint + lm_weight * lm.gather(1, ids), ids, psi)


def _stable_slots(parent: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
    """Where each utterance's W survivors go: (B, W), slot s takes survivor ``perm[b, s]``, given
    their parents' slots ``parent`` (B, W). A parent's first child takes the parent's own slot and
    the other children the slots of hypotheses that left no child, so most rows of the KV caches
    stay where they are and only new branches are copied (``KVCache.index_select``). The order of
    an utterance's hypotheses means nothing else to the search. ``live`` (B, W): False for empty
    survivors (-inf), which take no parent's slot."""
    w = parent.shape[1]
    perms = []
    lives = [[True] * w] * parent.shape[0] if live is None else live.tolist()
    for parents, alive in zip(parent.tolist(), lives, strict=True):
        slot = [-1] * w
        for j, p in enumerate(parents):
            if alive[j] and p not in slot:
                slot[j] = p
        free = iter(sorted(set(range(w)) - set(slot)))
        perm = [0] * w
        for j, s in enumerate(slot):
            perm[s if s >= 0 else next(free)] = j
        perms.append(perm)
    return torch.tensor(perms, device=parent.device)


def _end(finished: list[list[Hypothesis]], beams: _Beams, ended, top, parent, tail, length_norm: bool, raw,
         cap: int = 0):
    """Move the hypotheses ``ended`` (B, K) to ``finished``: their tokens are the parent row's
    (``parent`` (B, K)), followed by ``tail`` (B, K) where that is not None, and their scores
    ``top`` (B, K), taken in order of K (best first). ``raw``: per input utterance, (length with
    sos and eos, unnormalised score) of each, for end detection (None: not kept). ``cap`` > 0: an
    utterance keeps no more than that many ended hypotheses."""
    for bi, j in torch.nonzero(ended).tolist():
        s, u = float(top[bi, j]), int(beams.utts[bi])
        if cap and len(finished[u]) >= cap:
            continue
        hyp_tokens = beams.seqs[parent[bi, j]].tolist() + ([] if tail is None else [int(tail[bi, j])])
        finished[u].append(Hypothesis(hyp_tokens, s / (len(hyp_tokens) + 1) if length_norm else s))
        if raw is not None:
            raw[u].append((len(hyp_tokens) + 2, s))


@torch.inference_mode()
def beam_search(
    model,
    memory: torch.Tensor,
    mem_lens: torch.Tensor,
    beam_size: int = 10,
    ctc_weight: float = 0.0,
    ctc_log_probs: torch.Tensor | None = None,
    length_bonus: float = 0.0,
    length_norm: bool = False,
    max_len: int | None = None,
    min_len: int = 0,
    max_len_ratio: float = 1.0,
    pre_beam: int | None = None,
    nbest: int = 1,
    lm=None,
    lm_weight: float = 0.0,
    rules: str = "asr",
    prompt: WhisperPrompt | None = None,
    patience: float = 1.0,
) -> list[list[Hypothesis]]:
    """Batched joint CTC/attention beam search; memory (B, S, D), mem_lens (B,).

    Returns the ``nbest`` best hypotheses of each utterance, best first. ``ctc_log_probs``
    (B, S, V) default to ``model.ctc_log_probs(memory)`` when ``ctc_weight > 0``. ``pre_beam``:
    tokens per hypothesis that get CTC scores (default 1.5 x beam, ESPnet's; 0: all).
    ``min_len`` suppresses eos before that many tokens; ``max_len`` overrides the length limit.
    ``lm``: a language model network (``asr.lm``: ``init_cache``, ``step``) over the same ids, fused
    with ``lm_weight``; check the vocabularies first (``asr.lm.check_lm_fits``). ``rules``: ``asr`` or
    ``espnet`` (``asr.decode.rules``); with ``espnet``, ``max_len_ratio`` 0 is ESPnet's maxlenratio 0
    (every encoder frame, with end detection) and ``min_len`` drops shorter hypotheses. ``whisper``
    needs ``prompt`` (``asr.decode.whisper``) and stops at ``round(beam_size x patience)`` ended.
    """
    r = get_rules(rules)
    if r.whisper_prompt and prompt is None:
        raise ValueError("beam_search: rules 'whisper' need a prompt (asr.decode.whisper.WhisperPrompt)")
    if max_len_ratio == 0 and r.eos_scored_at_limit:
        raise ValueError(f"beam_search: max_len_ratio 0 needs rules with end detection, not {rules!r}")
    decoder = model.decoder
    if decoder is None:
        raise ValueError("beam_search: the model has no attention decoder (decoder_layers=0); use a CTC mode")
    if not 0.0 <= ctc_weight < 1.0:
        raise ValueError(f"beam_search: ctc_weight must be in [0, 1), got {ctc_weight} (1.0: use mode ctc_beam)")
    if lm_weight == 0:
        lm = None
    elif lm is not None and lm.vocab_size != model.vocab_size:
        raise ValueError(f"beam_search: the LM has {lm.vocab_size} ids, the ASR model {model.vocab_size}")
    b_total, dev = memory.shape[0], memory.device
    w, v, eos = beam_size, model.vocab_size, model.eos_id
    finished: list[list[Hypothesis]] = [[] for _ in range(b_total)]
    utts = torch.nonzero(mem_lens > 0).flatten()  # input position of each live utterance, (B,)
    if utts.numel() == 0:
        return [[Hypothesis([], 0.0)] for _ in range(b_total)]
    b = utts.numel()
    cap = max(1, round(w * patience)) if r.ended_capped else 0  # Whisper's max_candidates
    scorer = k_pre = None
    if ctc_weight > 0:
        lp = model.ctc_log_probs(memory) if ctc_log_probs is None else ctc_log_probs
        scorer = CTCPrefixScorer(lp[utts], mem_lens[utts], blank=model.blank_id, eos=eos)
        k_pre = v if pre_beam == 0 else pre_beam or max(1, int(1.5 * w))  # ESPnet's pre_beam_size (>= V: all)
    scores = torch.full((b, w), -math.inf, device=dev)  # one live hypothesis per utterance at the start
    scores[:, 0] = 0.0
    # the first step's W rows of an utterance are alike (sos, nothing seen): its decoder, LM and
    # CTC states hold one row per utterance, whose scores stand for all W (fan), until it branches
    fan = w
    limits = max_lengths(mem_lens, max_len, max_len_ratio, round_up=r.limit_rounds_up)[utts]
    detect = r.end_detect and max_len is None and max_len_ratio == 0
    raw = [[] for _ in range(b_total)] if detect else None  # (length, score) of the ended, for end detection
    cache = decoder.init_cache(memory[utts], mem_lens[utts])  # cross K/V once per utterance
    if prompt is not None:
        prompt = prompt.select(utts)
    # (B, P): what the decoder reads first (sos, or the start-of-transcript sequence): all but the last
    # token enter the cache, the last is the first input
    start = prompt.tokens if prompt is not None else torch.tensor(model.start_tokens, device=dev).expand(b, -1)
    cache = decoder.feed(start[:, :-1], cache)
    beams = _Beams(
        utts=utts,
        limits=limits,
        scores=scores,
        seqs=torch.zeros(b * w, 0, dtype=torch.long, device=dev),
        tokens=start[:, -1],
        cache=cache,
        ctc=scorer.initial_state(torch.arange(b, device=dev)) if scorer else None,
        lm_cache=lm.init_cache(b, dev) if lm is not None else None,
    )
    # scores only fall: a finished best cannot be beaten (for the n-best too with asr's rules)
    bound_stop = (length_bonus <= 0 and not length_norm and not r.rank_by_mean
                  and (nbest == 1 or not r.bound_stop_nbest_only))

    step = 0
    while b > 0:
        logits, beams.cache = decoder.step(beams.tokens, beams.cache)  # (B*W / fan, V)
        if prompt is not None:
            logits = filter_logits(logits, beams.seqs if fan == 1 else None, step, prompt)
        att = torch.log_softmax(logits.float(), dim=-1)
        if scorer is None and not r.decoder_may_emit_blank:
            att[:, model.blank_id] = -math.inf  # blank is never a decoder target (with CTC it has no prefix score)
        if step < min_len and r.min_len_suppresses_eos:
            att[:, eos] = -math.inf
        lm_lp = None
        if lm is not None:
            lm_lp, beams.lm_cache = lm.step(beams.tokens, beams.lm_cache)  # (B*W, V) log p_lm
        cand, cand_ids, psi = _joint_scores(att, scorer, beams.ctc, ctc_weight, k_pre, eos, lm_lp, lm_weight,
                                            model.blank_id)
        if fan > 1:  # each row's scores for the W rows it stands for: (B*W, K)
            cand, cand_ids, psi = (None if t is None else t.repeat_interleave(fan, 0) for t in (cand, cand_ids, psi))
        cand = cand + length_bonus
        at_limit = (beams.limits <= step).repeat_interleave(w) if r.eos_scored_at_limit else None  # only eos follows
        if at_limit is not None and bool(at_limit.any()):
            is_eos = (cand_ids == eos) if cand_ids is not None else (torch.arange(v, device=dev) == eos)
            cand = torch.where(at_limit.unsqueeze(1) & ~is_eos, -math.inf, cand)

        # asr: the 2W best candidates of each utterance (as in fairseq): eos among the first W ends a
        # hypothesis, the first W that are not eos continue. espnet: of the W best, those that are
        # eos end and the others continue.
        kc = cand.shape[1]
        total = (beams.scores.view(-1, 1) + cand).view(b, w * kc)  # (B, W*K)
        top, flat = total.topk(min(2 * w if r.keep_full_beam else w, w * kc), dim=1)  # (B, 2W or W)
        parent = torch.div(flat, kc, rounding_mode="floor") + torch.arange(b, device=dev).unsqueeze(1) * w
        tok = flat % kc if cand_ids is None else cand_ids[parent, flat % kc]  # (B, 2W or W)
        ended = (tok == eos) & torch.isfinite(top)
        if r.end_before_beam_full:  # Whisper: an eos ranked before the W-th continuing candidate ends
            ended &= ((tok != eos).cumsum(1) - (tok != eos).long()) < w
        else:
            ended[:, w:] = False
        _end(finished, beams, ended & (r.min_len_suppresses_eos or step >= min_len), top, parent, None, length_norm,
             raw, cap)  # fmt: skip
        if r.keep_full_beam:
            order = (torch.arange(top.shape[1], device=dev) + (tok == eos) * top.shape[1]).argsort(dim=1)[:, :w]
        else:  # the ended leave the beam
            top = top.masked_fill(tok == eos, -math.inf)
            order = torch.arange(w, device=dev).expand(b, w)
        parents = torch.div(flat.gather(1, order), kc, rounding_mode="floor")
        order = order.gather(1, _stable_slots(parents, torch.isfinite(top.gather(1, order))))
        sel_parent, tokens, new_scores = parent.gather(1, order), tok.gather(1, order), top.gather(1, order)
        if not r.eos_scored_at_limit:  # at the maximum length the survivors end as they are (ESPnet)
            last = (beams.limits - 1 <= step).unsqueeze(1) & torch.isfinite(new_scores)
            if bool(last.any()) and (r.min_len_suppresses_eos or step >= min_len):
                if r.ended_capped:  # Whisper: the best survivors fill the ended list up to W, best first
                    by = new_scores.argsort(1, descending=True)
                    _end(finished, beams, last.gather(1, by), new_scores.gather(1, by), sel_parent.gather(1, by),
                         tokens.gather(1, by), length_norm, raw, w)
                else:
                    _end(finished, beams, last, new_scores, sel_parent, tokens, length_norm, raw)
        step += 1

        # an utterance is done past its limit, when nothing runs or can improve, with W ended
        # hypotheses (asr) or by end detection (espnet); decided before anything moves, so that the
        # states of the utterances that stop stay behind
        best_run = new_scores.max(1).values  # (B,)
        done = (beams.limits < step if r.eos_scored_at_limit else beams.limits <= step) | torch.isneginf(best_run)
        if r.stop_when_beam_ended:
            done |= torch.tensor([len(finished[int(u)]) >= (cap or w) for u in beams.utts], device=dev)
        if bound_stop:
            best_fin = [max((h.score for h in finished[int(u)]), default=-math.inf) for u in beams.utts]
            done |= torch.tensor(best_fin, device=dev) >= best_run
        if detect:
            done |= torch.tensor([end_detected(raw[int(u)], step - 1) for u in beams.utts], device=dev)
        keep = None
        if bool(done.any()):
            keep = torch.nonzero(~done).flatten()
            if keep.numel() == 0:
                break
            sel_parent, tokens, new_scores, order, flat = (
                x[keep] for x in (sel_parent, tokens, new_scores, order, flat)
            )
        sel_parent, tokens = sel_parent.flatten(), tokens.flatten()  # (B'*W,)
        state_parent = sel_parent if fan == 1 else torch.div(sel_parent, fan, rounding_mode="floor")
        ctc = None
        if scorer is not None:
            chosen = psi[sel_parent, (flat % kc).gather(1, order).flatten()]
            ctc = scorer.extend(beams.ctc, state_parent, tokens, chosen)
        beams.advance(sel_parent, tokens, new_scores, ctc, keep, state_parent)
        b, fan = beams.utts.numel(), 1

    if r.rank_by_mean:  # Whisper's ranking: the mean log-probability per token (eos not counted)
        best_first = [sorted(hyps, key=lambda h: h.score / max(1, len(h.tokens)), reverse=True) for hyps in finished]
    else:
        best_first = [sorted(hyps, key=lambda h: h.score, reverse=True) for hyps in finished]
    if prompt is not None:  # selected for the live utterances above: row i is utts[i]
        for i, u in enumerate(utts.tolist()):
            for h in best_first[u]:
                h.language = prompt.languages[i]
    return [hyps[:nbest] or [Hypothesis([], -math.inf)] for hyps in best_first]
