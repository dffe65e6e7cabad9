"""Shallow fusion of a language model: the LM's cache, the batched beam search, CTC prefix search, rescoring.

The ASR model is the tiny one trained briefly on the synthetic task (``helpers_decode``); the LMs
have random weights made peaky (an LM that barely moves the scores would let wrong fusion pass).
``transformer_int8`` is the Transformer LM with int8 products (``asr.lm.quantize``): every property
of fusion holds for it too.
"""

from __future__ import annotations

import pytest
import torch
from helpers_decode import synthetic_batch, trained_tiny_model

from asr.config import DecodeConfig
from asr.decode import attention_rescoring, beam_search, ctc_prefix_beam_search, recognize
from asr.decode.ctc_beam import lm_sequence_log_probs
from asr.lm import LanguageModel, LMConfig, LMExperimentConfig, build_lm, check_lm_fits
from asr.lm.quantize import quantize_lm

VOCAB = 12


ESPNET_FORM = {"embed_dim": 16, "positions": "none", "layer_norm_eps": 1e-12}  # as asr import espnet --lm builds it


def random_lm(kind: str, vocab: int = VOCAB, seed: int = 1, sharpen: float = 4.0) -> torch.nn.Module:
    torch.manual_seed(seed)
    extra = ESPNET_FORM if kind == "transformer_espnet" else {}
    cfg = LMConfig(type=kind.removesuffix("_espnet").removesuffix("_int8"), vocab_size=vocab, d_model=32, heads=4,
                   ffn_dim=64, layers=2, dropout=0.0, **extra)  # fmt: skip
    lm = build_lm(cfg).eval()
    with torch.no_grad():
        lm.output.weight.mul_(sharpen)
    return quantize_lm(lm) if kind.endswith("_int8") else lm


@pytest.fixture(scope="module")
def trained():
    return trained_tiny_model(VOCAB, steps=100)


@pytest.fixture(scope="module")
def encoded(trained):
    model, _, protos = trained
    feats, lens, _, _ = synthetic_batch(16, VOCAB, torch.Generator().manual_seed(7), protos)
    with torch.inference_mode():
        memory, mem_lens = model.encode(feats, lens)
    return feats, lens, memory, mem_lens


@pytest.fixture(scope="module", params=["transformer", "lstm", "transformer_espnet", "transformer_int8"])
def lm(request):
    return random_lm(request.param)


# ----------------------------------------------------------------------------- the LM alone
def test_cached_steps_equal_full_forward_through_reordering(lm):
    """Step-by-step log-probs (cache reordered half-way, as beam search does) equal the full forward."""
    g = torch.Generator().manual_seed(3)
    seqs = torch.randint(1, VOCAB - 1, (6, 9), generator=g)
    seqs[:, 0] = lm.sos_id
    with torch.inference_mode():
        full = torch.log_softmax(lm(seqs).float(), dim=-1)  # (6, 9, V)
        cache = lm.init_cache(6)
        rows = torch.arange(6)
        worst = 0.0
        for t in range(9):
            if t == 4:  # reorder and repeat rows, as beams do when parents change
                perm = torch.tensor([5, 5, 0, 3, 2, 1])
                cache, rows = cache.index_select(perm), rows[perm]
            lp, cache = lm.step(seqs[rows, t], cache)
            worst = max(worst, float((lp - full[rows, t]).abs().max()))
    assert worst <= 1e-5


def test_transformer_lm_reuses_the_decoder_layer():
    from asr.model.transformer import DecoderLayer

    lm = random_lm("transformer")
    assert all(type(layer) is DecoderLayer and layer.cross_attn is None for layer in lm.layers)
    assert not any("cross" in k for k in lm.state_dict())


# ----------------------------------------------------------------------------- attention beam search
@pytest.mark.parametrize("ctc_weight", [0.0, 0.3])
def test_lm_weight_zero_is_the_search_without_lm(trained, encoded, lm, ctc_weight):
    model = trained[0]
    _, _, memory, mem_lens = encoded
    plain = beam_search(model, memory, mem_lens, beam_size=4, ctc_weight=ctc_weight, nbest=3)
    zero = beam_search(model, memory, mem_lens, beam_size=4, ctc_weight=ctc_weight, nbest=3, lm=lm, lm_weight=0.0)
    assert [[(h.tokens, h.score) for h in u] for u in zero] == [[(h.tokens, h.score) for h in u] for u in plain]
    fused = beam_search(model, memory, mem_lens, beam_size=4, ctc_weight=ctc_weight, lm=lm, lm_weight=1.0)
    assert sum(f[0].tokens != p[0].tokens for f, p in zip(fused, plain, strict=True)) >= 2, "the LM changed nothing"


@pytest.mark.parametrize("ctc_weight", [0.0, 0.3])
def test_batch_of_16_equals_alone_with_lm(trained, encoded, lm, ctc_weight):
    model = trained[0]
    feats, lens, memory, mem_lens = encoded
    kw = dict(beam_size=4, ctc_weight=ctc_weight, nbest=2, lm=lm, lm_weight=0.6)
    batch = beam_search(model, memory, mem_lens, **kw)
    assert len({tuple(h[0].tokens) for h in batch}) > 8
    with torch.inference_mode():
        for i in range(16):
            m, ml = model.encode(feats[i : i + 1, : lens[i]], lens[i : i + 1])
            alone = beam_search(model, m, ml, **kw)[0]
            assert [h.tokens for h in alone] == [h.tokens for h in batch[i]], f"utterance {i}"
            assert [h.score for h in alone] == pytest.approx([h.score for h in batch[i]], abs=1e-4)


def test_fused_scores_equal_recomputation(trained, encoded, lm):
    """A hypothesis' accumulated score = (1 - w) log p_att + w log p_ctc + lm_weight log p_lm (all of
    (y, eos), recomputed without caches) + bonus per token: the LM cache followed its beams."""
    model = trained[0]
    _, _, memory, mem_lens = encoded
    w, lw, bonus = 0.3, 0.7, 0.4
    hyps = beam_search(model, memory, mem_lens, beam_size=5, ctc_weight=w, length_bonus=bonus, nbest=3, lm=lm,
                       lm_weight=lw)  # fmt: skip
    with torch.inference_mode():
        for i in range(0, 16, 3):
            n = int(mem_lens[i])
            mem = memory[i : i + 1, :n]
            for h in hyps[i]:
                y = torch.tensor([h.tokens], dtype=torch.long)
                ys_in, ys_out = model.decoder_io(y, torch.tensor([len(h.tokens)]))
                att = float(torch.log_softmax(model.decoder(ys_in, mem, torch.tensor([n])), -1)[0].gather(
                    1, ys_out[0].unsqueeze(1)).sum())  # fmt: skip
                ctc = -float(torch.nn.functional.ctc_loss(model.ctc_log_probs(mem).double().transpose(0, 1), y,
                                                          torch.tensor([n]), torch.tensor([len(h.tokens)]),
                                                          reduction="sum"))  # fmt: skip
                lm_lp = float(lm_sequence_log_probs(lm, [h.tokens])[0])
                expected = (1 - w) * att + w * ctc + lw * lm_lp + bonus * (len(h.tokens) + 1)
                assert h.score == pytest.approx(expected, abs=2e-3), (i, h.tokens)


# ----------------------------------------------------------------------------- CTC prefix search, rescoring
def test_ctc_prefix_search_with_lm_scores_ctc_plus_lm():
    """Unpruned: every n-best score is log P_ctc(y) + lm_weight * log p_lm(y, eos), best first; weight 0 = no LM."""
    v, t = 5, 6
    lm = random_lm("transformer", vocab=v)
    lp = (torch.randn(1, t, v, generator=torch.Generator().manual_seed(5)) * 1.5).log_softmax(-1)
    plain = ctc_prefix_beam_search(lp, torch.tensor([t]), beam_size=1000)[0]
    assert ctc_prefix_beam_search(lp, torch.tensor([t]), 1000, lm, 0.0)[0] == plain
    fused = ctc_prefix_beam_search(lp, torch.tensor([t]), 1000, lm, 0.8)[0]
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    ctc = {tuple(h.tokens): h.score for h in plain}
    for h in fused[:10]:
        lm_lp = float(lm_sequence_log_probs(lm, [h.tokens])[0])
        assert h.score == pytest.approx(ctc[tuple(h.tokens)] + 0.8 * lm_lp, abs=1e-4)
    assert fused[0].tokens != plain[0].tokens, "the LM changed nothing"


def test_rescoring_adds_the_lm(trained, encoded, lm):
    model = trained[0]
    _, _, memory, mem_lens = encoded
    with torch.inference_mode():
        nbest = ctc_prefix_beam_search(model.ctc_log_probs(memory), mem_lens, beam_size=4)
    plain = attention_rescoring(model, memory, mem_lens, nbest, ctc_weight=0.3)
    fused = attention_rescoring(model, memory, mem_lens, nbest, ctc_weight=0.3, lm=lm, lm_weight=0.5)
    for i in range(16):
        lm_lp = lm_sequence_log_probs(lm, [h.tokens for h in nbest[i]]).tolist()
        plain_i = attention_rescoring(model, memory[i : i + 1], mem_lens[i : i + 1], [nbest[i]], ctc_weight=0.3)
        assert plain_i[0].tokens == plain[i].tokens
        # the fused best is the n-best entry with the highest plain score + 0.5 * its LM log-prob
        scored = []
        for h, lp in zip(nbest[i], lm_lp, strict=True):
            alone = attention_rescoring(model, memory[i : i + 1], mem_lens[i : i + 1], [[h]], ctc_weight=0.3)[0]
            scored.append((alone.score + 0.5 * lp, h.tokens))
        best = max(scored)
        assert fused[i].tokens == best[1] and fused[i].score == pytest.approx(best[0], abs=1e-4)


@pytest.mark.parametrize("mode", ["attention", "ctc_beam", "rescore", "ctc_greedy"])
def test_recognize_takes_an_lm_in_every_mode(trained, lm, mode):
    model, _, protos = trained
    feats, lens, _, _ = synthetic_batch(4, VOCAB, torch.Generator().manual_seed(2), protos)
    cfg = DecodeConfig(mode=mode, beam_size=3, lm_weight=0.5)
    hyps = recognize(model, feats, lens, cfg, lm=lm)
    assert len(hyps) == 4 and all(h.tokens for h in hyps)
    assert [h.tokens for h in recognize(model, feats, lens, cfg.updated(lm_weight=0.0), lm=lm)] == [
        h.tokens for h in recognize(model, feats, lens, cfg.updated(lm_weight=0.0))]  # fmt: skip


# ----------------------------------------------------------------------------- bad input
def test_lm_of_another_vocabulary_is_a_clear_error(trained, tmp_path):
    model = trained[0]
    lm = LanguageModel(random_lm("lstm", vocab=VOCAB + 3), LMExperimentConfig(LMConfig(vocab_size=VOCAB + 3)), None,
                       tmp_path / "lm")  # fmt: skip
    with pytest.raises(ValueError, match=rf"LM {tmp_path / 'lm'} has a vocabulary of 15 ids .*has 12 "):
        check_lm_fits(lm, model.vocab_size, None)
    feats, lens, _, _ = synthetic_batch(1, VOCAB, torch.Generator().manual_seed(1), trained[2])
    with torch.inference_mode():
        memory, mem_lens = model.encode(feats, lens)
    with pytest.raises(ValueError, match="the LM has 15 ids, the ASR model 12"):
        beam_search(model, memory, mem_lens, lm=lm.model, lm_weight=0.5)
