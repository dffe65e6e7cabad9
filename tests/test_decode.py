"""Search invariants on small random-weight models: batching, caching, beam 1 vs greedy, CTC sums."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers_decode import synthetic_batch, trained_tiny_model

from asr.config import DecodeConfig
from asr.decode import (
    attention_rescoring,
    beam_search,
    ctc_greedy_search,
    ctc_prefix_beam_search,
    greedy_search,
    recognize,
)
from asr.decode.ctc_prefix_score import CTCPrefixScorer
from asr.decode.speeds import recognize_views
from asr.model import ASRModel

VOCAB = 12


@pytest.fixture(scope="module")
def trained():
    return trained_tiny_model(VOCAB, steps=100)


@pytest.fixture(scope="module")
def model(trained) -> ASRModel:
    return trained[0]


@pytest.fixture(scope="module")
def encoded(trained):
    """16 synthetic utterances of mixed lengths, their encoder output and lengths."""
    model, _, protos = trained
    feats, lens, _, _ = synthetic_batch(16, VOCAB, torch.Generator().manual_seed(7), protos)
    assert len(set(lens.tolist())) > 10
    with torch.inference_mode():
        memory, mem_lens = model.encode(feats, lens)
    return feats, lens, memory, mem_lens


def reference_greedy(model, memory, mem_len, max_len):
    """Greedy search recomputing the decoder over the whole prefix at each step (no cache)."""
    toks = [model.sos_id]
    with torch.inference_mode():
        for _ in range(max_len):
            logits = model.decoder(torch.tensor([toks]), memory, torch.tensor([mem_len]))[0, -1]
            logits[0] = -float("inf")
            nxt = int(logits.argmax())
            if nxt == model.eos_id:
                break
            toks.append(nxt)
    return toks[1:]


def test_greedy_cached_equals_recomputation(model, encoded):
    _, _, memory, mem_lens = encoded
    hyps = greedy_search(model, memory, mem_lens)
    lengths = [len(h) for h in hyps]
    assert max(lengths) > 3 and len(set(map(tuple, hyps))) > 10, "hypotheses too trivial to test anything"
    for i in range(0, 16, 3):
        n = int(mem_lens[i])
        ref = reference_greedy(model, memory[i : i + 1, :n], n, n)
        assert hyps[i] == ref


def test_greedy_batch_equals_alone(model, encoded):
    feats, lens, memory, mem_lens = encoded
    batch = greedy_search(model, memory, mem_lens)
    with torch.inference_mode():
        for i in range(16):
            m, ml = model.encode(feats[i : i + 1, : lens[i]], lens[i : i + 1])
            assert greedy_search(model, m, ml) == [batch[i]], f"utterance {i}"


def test_greedy_limits(model, encoded):
    _, _, memory, mem_lens = encoded
    hyps = greedy_search(model, memory, mem_lens, max_len=5, min_len=5)
    assert all(len(h) == 5 for h in hyps)
    hyps = greedy_search(model, memory, mem_lens, max_len=2)
    assert all(len(h) <= 2 for h in hyps)
    assert all(0 not in h and model.eos_id not in h for h in hyps)


def test_ctc_greedy_collapses():
    v = 5
    path = [0, 2, 2, 0, 2, 3, 3, 0, 0, 4, 1, 1]
    lp = torch.full((2, len(path), v), -10.0)
    lp[0, torch.arange(len(path)), torch.tensor(path)] = 0.0
    lp[1] = lp[0]
    assert ctc_greedy_search(lp, torch.tensor([len(path), 5])) == [[2, 2, 3, 4, 1], [2, 2]]


def _collapse(path: tuple[int, ...]) -> tuple[int, ...]:
    out, prev = [], None
    for s in path:
        if s != prev and s != 0:
            out.append(s)
        prev = s
    return tuple(out)


def _brute_force(lp: torch.Tensor, prefix: tuple[int, ...], exact: bool) -> float:
    """log of the total probability of all alignments whose output starts with (or equals) prefix."""
    t, v = lp.shape
    total = torch.tensor(-float("inf"), dtype=torch.float64)
    for path in itertools.product(range(v), repeat=t):
        out = _collapse(path)
        if (out == prefix) if exact else (out[: len(prefix)] == prefix):
            total = torch.logaddexp(total, lp[torch.arange(t), torch.tensor(path)].sum())
    return float(total)


def test_ctc_prefix_scores_in_float32_stay_within_1e5_of_float64():
    """A model's CTC log-probs are float32: the per-step sum over frames then runs in float32;
    over several steps the scores stay within 1e-5 of the float64 computation."""
    v, eos = 50, 49
    lens = torch.tensor([40, 25, 33])
    lp = (torch.randn(3, 40, v, generator=torch.Generator().manual_seed(5)) * 3).double().log_softmax(-1)
    s64, s32 = CTCPrefixScorer(lp, lens, 0, eos), CTCPrefixScorer(lp.float(), lens, 0, eos)
    st64 = st32 = s64.initial_state(torch.arange(3).repeat_interleave(2))
    for step in range(6):
        tokens = torch.randint(1, eos, (6, 5), generator=torch.Generator().manual_seed(step))
        tokens[:, -1] = eos
        p64, p32 = s64.score(st64, tokens), s32.score(st32, tokens)
        assert p32.dtype == torch.float64 and torch.allclose(p32, p64, rtol=0, atol=1e-5)
        st64 = s64.extend(st64, torch.arange(6), tokens[:, 0], p64[:, 0])
        st32 = s32.extend(st32, torch.arange(6), tokens[:, 0], p32[:, 0])


def test_ctc_prefix_scores_equal_brute_force():
    """Every prefix up to length 3 over a 4-token vocabulary, three utterances of different lengths
    in one padded batch: log psi (and eos = full-sequence probability) equal the sum over all
    alignments, and states built step by step with ``extend`` stay exact."""
    v, eos = 4, 3
    lens = torch.tensor([6, 4, 5])
    lp = (torch.randn(3, 6, v, generator=torch.Generator().manual_seed(3)) * 2).double().log_softmax(-1)
    scorer = CTCPrefixScorer(lp, lens, blank=0, eos=eos)
    utt = torch.arange(3)
    state = scorer.initial_state(utt)
    prefixes = [()] * 3
    checked = 0
    for _ in range(3):
        psi = scorer.score_all(state)  # (N, V)
        assert torch.isneginf(psi[:, 0]).all()
        for n, prefix in enumerate(prefixes):
            b, n_frames = int(state.utt[n]), int(lens[state.utt[n]])
            lp_b = lp[b, :n_frames]
            assert psi[n, eos].item() == pytest.approx(_brute_force(lp_b, prefix, exact=True), abs=1e-9)
            for c in (1, 2):
                ref = _brute_force(lp_b, prefix + (c,), exact=False)
                assert psi[n, c].item() == pytest.approx(ref, abs=1e-9), (b, prefix, c)
                checked += 1
        # extend every hypothesis by tokens 1 and 2 (one repeat of the last token, one not)
        parent = torch.arange(len(prefixes)).repeat_interleave(2)
        tokens = torch.tensor([1, 2]).repeat(len(prefixes))
        state = scorer.extend(state, parent, tokens, psi[parent, tokens])
        prefixes = [prefixes[p] + (t,) for p, t in zip(parent.tolist(), tokens.tolist(), strict=True)]
    assert checked == 2 * 3 * (1 + 2 + 4)


def _alone(model, feats, lens, i):
    with torch.inference_mode():
        return model.encode(feats[i : i + 1, : lens[i]], lens[i : i + 1])


@pytest.mark.parametrize("ctc_weight", [0.0, 0.3])
def test_beam_batch_equals_alone(model, encoded, ctc_weight):
    feats, lens, memory, mem_lens = encoded
    batch = beam_search(model, memory, mem_lens, beam_size=4, ctc_weight=ctc_weight, nbest=2)
    assert len({tuple(h[0].tokens) for h in batch}) > 10
    for i in range(16):
        m, ml = _alone(model, feats, lens, i)
        alone = beam_search(model, m, ml, beam_size=4, ctc_weight=ctc_weight, nbest=2)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batch[i]], f"utterance {i}"
        assert [h.score for h in alone] == pytest.approx([h.score for h in batch[i]], abs=1e-4)


def test_beam_batch_without_padding_equals_alone(model, encoded):
    """Equal lengths (no encoder frame is padding: no cross-attention mask, asr.model.transformer)
    while utterances still stop at different steps: each utterance as alone."""
    _, _, memory, mem_lens = encoded
    n = int(mem_lens.min())
    mem, lens = memory[:, :n], torch.full_like(mem_lens, n)
    assert model.decoder.init_cache(mem, lens).memory_keep is None
    batch = beam_search(model, mem, lens, beam_size=4, ctc_weight=0.3)
    assert len({len(h[0].tokens) for h in batch}) > 1  # they stop at different steps
    for i in range(16):
        alone = beam_search(model, mem[i : i + 1], lens[i : i + 1], beam_size=4, ctc_weight=0.3)[0]
        assert alone[0].tokens == batch[i][0].tokens, f"utterance {i}"
        assert alone[0].score == pytest.approx(batch[i][0].score, abs=1e-4)


def test_beam_first_step_runs_one_row_per_utterance(model, encoded, monkeypatch):
    """Before the first step an utterance's W hypotheses are one (sos, nothing seen): the decoder
    steps one row per utterance, then W per utterance once the beams branch. The results are the
    ones the tests around this one check (alone, recomputed scores, ESPnet's)."""
    _, _, memory, mem_lens = encoded
    rows, step = [], model.decoder.step

    def counting(tokens, cache):
        rows.append(tokens.shape[0])
        return step(tokens, cache)

    monkeypatch.setattr(model.decoder, "step", counting)
    beam_search(model, memory, mem_lens, beam_size=4, ctc_weight=0.3)
    assert rows[:2] == [16, 64]


def test_beam1_equals_greedy(model, encoded):
    _, _, memory, mem_lens = encoded
    greedy = greedy_search(model, memory, mem_lens)
    beam = beam_search(model, memory, mem_lens, beam_size=1)
    assert [h[0].tokens for h in beam] == greedy
    forced = beam_search(model, memory, mem_lens, beam_size=1, max_len=6, min_len=6)
    assert [h[0].tokens for h in forced] == greedy_search(model, memory, mem_lens, max_len=6, min_len=6)


def _teacher_forced(model, memory, mem_lens, i, tokens):
    """(log p_att(tokens, eos), log p_ctc(tokens)) of utterance i, recomputed without any cache."""
    n = int(mem_lens[i])
    mem = memory[i : i + 1, :n]
    y = torch.tensor([tokens], dtype=torch.long)
    with torch.inference_mode():
        ys_in, ys_out = model.decoder_io(y, torch.tensor([len(tokens)]))
        lp = torch.log_softmax(model.decoder(ys_in, mem, torch.tensor([n])).float(), -1)
        att = lp[0].gather(1, ys_out[0].unsqueeze(1)).sum()
        ctc_lp = model.ctc_log_probs(mem).double()
        ctc = -torch.nn.functional.ctc_loss(
            ctc_lp.transpose(0, 1), y, torch.tensor([n]), torch.tensor([len(tokens)]), reduction="sum"
        )
    return float(att), float(ctc)


@pytest.mark.parametrize("pre_beam", [None, 0])
def test_joint_scores_equal_recomputation(model, encoded, pre_beam):
    """The score a hypothesis accumulated step by step (cached decoder, CTC prefix deltas) equals
    (1 - w) * teacher-forced attention log-prob + w * CTC log-likelihood of the whole sequence."""
    _, _, memory, mem_lens = encoded
    w, bonus = 0.4, 0.5
    hyps = beam_search(
        model, memory, mem_lens, beam_size=5, ctc_weight=w, length_bonus=bonus, pre_beam=pre_beam, nbest=3
    )
    for i in range(0, 16, 2):
        for h in hyps[i]:
            att, ctc = _teacher_forced(model, memory, mem_lens, i, h.tokens)
            expected = (1 - w) * att + w * ctc + bonus * (len(h.tokens) + 1)
            assert h.score == pytest.approx(expected, abs=2e-3), (i, h.tokens)


def test_ctc_improves_search_on_the_synthetic_task(trained):
    """The joint search should be right more often than attention alone on this barely trained model."""
    model, _, protos = trained
    feats, lens, tokens, token_lens = synthetic_batch(32, VOCAB, torch.Generator().manual_seed(11), protos)
    with torch.inference_mode():
        memory, mem_lens = model.encode(feats, lens)
    refs = [t[:n].tolist() for t, n in zip(tokens, token_lens, strict=True)]

    def correct(ctc_weight):
        hyps = beam_search(model, memory, mem_lens, beam_size=4, ctc_weight=ctc_weight)
        return sum(h[0].tokens == r for h, r in zip(hyps, refs, strict=True))

    assert correct(0.5) > correct(0.0)


def test_ctc_prefix_beam_scores_are_sequence_likelihoods():
    """With no pruning, each n-best score is log P_ctc(y) (= -ctc_loss), and the best one
    is the most likely labelling found by brute force."""
    v, t = 4, 6
    lp = (torch.randn(1, t, v, generator=torch.Generator().manual_seed(5)) * 1.5).double().log_softmax(-1)
    nbest = ctc_prefix_beam_search(lp, torch.tensor([t]), beam_size=1000)[0]
    assert len(nbest) > 20
    for h in nbest[:10]:
        ref = (
            -torch.nn.functional.ctc_loss(
                lp[0].unsqueeze(1),
                torch.tensor([h.tokens]),
                torch.tensor([t]),
                torch.tensor([len(h.tokens)]),
                reduction="sum",
            )
            if h.tokens
            else lp[0, :, 0].sum()
        )
        assert h.score == pytest.approx(float(ref), abs=1e-5)
    labellings = {_collapse(p) for p in itertools.product(range(v), repeat=t)}
    best = max(labellings, key=lambda y: _brute_force(lp[0], y, exact=True))
    assert tuple(nbest[0].tokens) == best


def test_attention_rescoring_picks_the_best_joint_score(model, encoded):
    _, _, memory, mem_lens = encoded
    with torch.inference_mode():
        lp = model.ctc_log_probs(memory)
    nbest = ctc_prefix_beam_search(lp, mem_lens, beam_size=4)
    best = attention_rescoring(model, memory, mem_lens, nbest, ctc_weight=0.3)
    for i in (0, 5, 9):
        scored = []
        for h in nbest[i]:
            att, _ = _teacher_forced(model, memory, mem_lens, i, h.tokens)
            scored.append((0.7 * att + 0.3 * h.score, h.tokens))
        s, toks = max(scored)
        assert best[i].tokens == toks and best[i].score == pytest.approx(s, abs=1e-3)


@pytest.mark.parametrize("mode", ["attention", "ctc_greedy", "ctc_beam", "rescore"])
def test_recognize_modes(trained, mode):
    model, _, protos = trained
    feats, lens, tokens, token_lens = synthetic_batch(8, VOCAB, torch.Generator().manual_seed(13), protos)
    hyps = recognize(model, feats, lens, DecodeConfig(mode=mode, beam_size=3))
    assert len(hyps) == 8
    assert all(isinstance(h.score, float) and 0 not in h.tokens and VOCAB - 1 not in h.tokens for h in hyps)
    assert any(h.tokens for h in hyps)


def test_length_bonus_lengthens_and_norm_ranks(model, encoded):
    _, _, memory, mem_lens = encoded
    plain = beam_search(model, memory, mem_lens, beam_size=4)
    longer = beam_search(model, memory, mem_lens, beam_size=4, length_bonus=3.0)
    assert sum(len(h[0].tokens) for h in longer) > sum(len(h[0].tokens) for h in plain)
    normed = beam_search(model, memory, mem_lens, beam_size=4, length_norm=True, nbest=4)
    for hyps in normed:
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def _views(model, protos):
    """Six synthetic utterances heard twice: as made, and with other noise and every 4th frame dropped."""
    feats, lens, _, _ = synthetic_batch(6, VOCAB, torch.Generator().manual_seed(21), protos)
    g = torch.Generator().manual_seed(22)
    keep = [t for t in range(feats.shape[1]) if t % 4 != 3]
    other = (feats + 0.5 * torch.randn(feats.shape, generator=g))[:, keep]
    other_lens = torch.tensor([sum(1 for t in keep if t < n) for n in lens.tolist()])
    ids = [f"u{i}" for i in range(6)]
    return [(ids, feats, lens), (ids[::-1], other.flip(0), other_lens.flip(0))]  # the second in another order


@pytest.mark.parametrize("mode", ["attention", "ctc_greedy", "ctc_beam", "rescore"])
def test_one_view_is_the_search_itself(trained, mode):
    model, _, protos = trained
    ids, feats, lens = _views(model, protos)[0]
    cfg = DecodeConfig(mode=mode, beam_size=4, ctc_weight=0.3)
    alone = recognize(model, feats, lens, cfg)
    views = recognize_views(model, [(ids, feats, lens)], cfg)
    assert [views[u].tokens for u in ids] == [h.tokens for h in alone]
    got, want = [views[u].score for u in ids], [h.score for h in alone]
    if mode == "attention":  # the search's own joint score, recomputed whole
        assert got == pytest.approx(want, abs=1e-3)
    elif mode != "ctc_greedy":  # every alignment summed, where the prefix search sums those its beam kept
        assert all(g >= w - 1e-3 for g, w in zip(got, want, strict=True))


def test_views_choose_the_best_mean_joint_score_over_the_pooled_nbest(trained):
    model, _, protos = trained
    views = _views(model, protos)
    cfg = DecodeConfig(mode="attention", beam_size=3, ctc_weight=0.3)
    got = recognize_views(model, views, cfg)
    encoded = []
    pool = {}
    for ids, feats, lens in views:
        with torch.inference_mode():
            memory, mem_lens = model.encode(feats, lens)
        encoded.append((ids, memory, mem_lens))
        nbest = beam_search(model, memory, mem_lens, beam_size=3, ctc_weight=0.3, nbest=3)
        for uid, hyps in zip(ids, nbest, strict=True):
            pool.setdefault(uid, set()).update(tuple(h.tokens) for h in hyps)
    pooled_more = 0
    for uid, cands in pool.items():
        pooled_more += len(cands) > 3
        def mean(y, uid=uid):
            total = 0.0
            for ids, memory, mem_lens in encoded:
                att, ctc = _teacher_forced(model, memory, mem_lens, ids.index(uid), list(y))
                total += 0.7 * att + 0.3 * ctc
            return total / len(encoded)
        best = max(cands, key=mean)
        assert tuple(got[uid].tokens) == best and got[uid].score == pytest.approx(mean(best), abs=1e-3)
    assert pooled_more  # the views disagree somewhere: a real combination was tested


def test_an_utterance_missing_from_a_view_is_scored_in_the_others(trained):
    model, _, protos = trained
    (ids, feats, lens), (ids2, feats2, lens2) = _views(model, protos)
    cfg = DecodeConfig(mode="attention", beam_size=3, ctc_weight=0.3)
    got = recognize_views(model, [(ids, feats, lens), (ids2[1:], feats2[1:], lens2[1:])], cfg)
    alone = recognize(model, feats[-1:], lens[-1:], cfg)[0]  # ids2[0] is the last utterance
    assert set(got) == set(ids) and got[ids[-1]].tokens == alone.tokens
