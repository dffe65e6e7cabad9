"""The model's invariants: padding, causality, KV cache, attention against its formula, losses."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from asr.config import ModelConfig
from asr.model import ASRModel, MultiHeadAttention, causal_keep_mask, lengths_to_keep_mask

TOL = 1e-5


def small_model(frontend="linear", norm="pre", vocab=23, **kw) -> ASRModel:
    cfg = ModelConfig(
        d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
        frontend=frontend, norm=norm, vocab_size=vocab, **kw,
    )
    model = ASRModel(cfg).eval()
    with torch.no_grad():  # non-trivial CMVN so that padding values really differ after it
        model.cmvn.mean.normal_()
        model.cmvn.istd.uniform_(0.5, 2.0)
    return model


@pytest.mark.parametrize("frontend", ["linear", "conv2d", "conv2d8"])
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("utterance_cmn", [False, True])
def test_padding_invariance(frontend, norm, utterance_cmn):
    kw = {"conv_stack": 2} if frontend == "conv2d8" else {}
    model = small_model(frontend.removesuffix("8"), norm, utterance_cmn=utterance_cmn, **kw)
    t_short, t_long = 37, 111  # beside an utterance three times longer
    short = torch.randn(1, t_short, 80)
    batch = torch.randn(2, t_long, 80) * 3.0 + 1.0  # padding filled with garbage, not zeros
    batch[1, :t_short] = short[0]
    lens = torch.tensor([t_long, t_short])
    tokens = torch.randint(2, 22, (1, 6))
    tok_batch = torch.randint(2, 22, (2, 9))
    tok_batch[1, :6] = tokens[0]
    with torch.no_grad():
        mem1, ml1 = model.encode(short, torch.tensor([t_short]))
        memb, mlb = model.encode(batch, lens)
        n = int(ml1[0])
        assert int(mlb[1]) == n and mem1.shape[1] == n
        d_enc = (mem1[0] - memb[1, :n]).abs().max().item()
        d_ctc = (model.ctc_log_probs(mem1)[0] - model.ctc_log_probs(memb)[1, :n]).abs().max().item()
        lo1 = model.decoder(tokens, mem1, ml1)
        lob = model.decoder(tok_batch, memb, mlb)
        d_dec = (lo1[0] - lob[1, :6]).abs().max().item()
    name = f"{frontend}/{norm}/cmn={utterance_cmn}"
    print(f"padding invariance {name}: encoder {d_enc:.1e} ctc {d_ctc:.1e} decoder {d_dec:.1e}")
    assert d_enc <= TOL and d_ctc <= TOL and d_dec <= TOL


@pytest.mark.parametrize(
    "frontend,conv_stack,lens,min_frames",
    [("linear", 1, [4, 5, 7, 8, 9], 4), ("conv2d", 1, [7, 8, 10, 11, 15], 7), ("conv2d", 2, [11, 12, 14, 18, 19], 11)],
)
def test_frontend_output_lengths_are_exact(frontend, conv_stack, lens, min_frames):
    model = small_model(frontend, conv_stack=conv_stack)
    for t in lens:
        x = torch.randn(1, t, 80)
        out, out_lens = model.frontend(x, torch.tensor([t]))
        assert out.shape[1] == int(out_lens[0]) >= 1
    assert model.min_input_frames == min_frames
    assert int(model.frontend.output_lengths(torch.tensor([min_frames - 1]))[0]) == 0


def test_decoder_is_causal():
    model = small_model()
    mem, ml = model.encode(torch.randn(1, 40, 80), torch.tensor([40]))
    tokens = torch.randint(2, 22, (1, 10))
    changed = tokens.clone()
    changed[0, 6:] = (changed[0, 6:] + 5) % 20 + 2
    with torch.no_grad():
        a, b = model.decoder(tokens, mem, ml), model.decoder(changed, mem, ml)
    assert (a[0, :6] - b[0, :6]).abs().max() == 0
    assert (a[0, 6:] - b[0, 6:]).abs().max() > 1e-3


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_kv_cache_reproduces_teacher_forcing(norm):
    model = small_model(norm=norm)
    feats = torch.randn(3, 50, 80)
    lens = torch.tensor([50, 31, 12])
    tokens = torch.randint(2, 22, (3, 8))
    with torch.no_grad():
        mem, ml = model.encode(feats, lens)
        full = model.decoder(tokens, mem, ml)  # (B, U, V)
        cache = model.decoder.init_cache(mem, ml)
        steps = []
        for t in range(tokens.shape[1]):
            logits, cache = model.decoder.step(tokens[:, t], cache)
            steps.append(logits)
        stepped = torch.stack(steps, 1)
        # reordering hypotheses through the cache keeps them exact
        perm = torch.tensor([2, 0, 1])
        cache_p = model.decoder.init_cache(mem, ml).index_select(perm)
        for t in range(4):
            lp, cache_p = model.decoder.step(tokens[perm, t], cache_p)
    d = (full - stepped).abs().max().item()
    print(f"KV cache vs teacher forcing ({norm}): {d:.1e}")
    assert d <= TOL
    assert (lp - full[perm, 3]).abs().max() <= TOL


def test_kv_cache_grows_reorders_and_shrinks_exactly():
    """Past the buffer's first chunk (40 tokens > CHUNK), through reorders that repeat rows and a
    shrink to fewer rows (as greedy search drops finished utterances), every step's logits equal
    teacher forcing of the row's own token history; the two buffers swap instead of reallocating, and
    a reorder in which no row is read after it was written (sources that stay put, or rows that
    move down as utterances stop) copies the moved rows in place, however many move."""
    from asr.model.kv_cache import CHUNK

    model = small_model()
    g = torch.Generator().manual_seed(5)
    n, steps = 4, CHUNK + 8
    feats, lens = torch.randn(n, 40, 80, generator=g), torch.tensor([40, 33, 21, 9])
    tokens = torch.randint(2, 22, (n, steps), generator=g)
    reorders = {3: torch.tensor([1, 1, 0, 3]), 10: torch.tensor([0, 1, 3, 3]), 20: torch.tensor([3, 2, 2, 0]),
                30: torch.tensor([2, 2, 2, 2]), 34: torch.tensor([3, 3]), 38: torch.tensor([0, 0, 1])}  # fmt: skip
    with torch.no_grad():
        mem, ml = model.encode(feats, lens)
        cache = model.decoder.init_cache(mem, ml)
        hist = torch.arange(n).unsqueeze(1).expand(n, steps)  # (row, step): the utterance whose token row has
        utt = torch.arange(n)  # the utterance (memory) each row belongs to
        buffers = []
        worst = 0.0
        for t in range(steps):
            if t in reorders:
                idx = reorders[t]
                buffers.append(cache.self_kv._buf.untyped_storage().data_ptr())
                hist, utt = hist[idx], utt[idx]
                cache = cache.index_select(idx, cross_index=idx)
                buffers.append(cache.self_kv._buf.untyped_storage().data_ptr())
            rows_tokens = tokens[hist[:, t], t]
            logits, cache = model.decoder.step(rows_tokens, cache)
            hist_tokens = torch.stack([tokens[hist[:, s], s] for s in range(t + 1)], 1)  # (rows, t + 1)
            full = model.decoder(hist_tokens, mem[utt], ml[utt])[:, -1]
            worst = max(worst, float((logits - full).abs().max()))
    assert cache.length == steps
    assert worst <= TOL
    first, spare, _, _, _, back, *rest = buffers  # the buffer before and after each reorder
    assert spare != first  # the first reorder reads row 0 after writing it: every row into a new spare
    assert buffers[2] == buffers[3] == spare  # one moved row whose source stays: copied in place
    assert back == first  # row 0 read after written: copied into the spare, which is the first buffer again
    assert rest[0] == rest[1] == back  # three of four rows move, their source stays: in place
    assert rest[2] == rest[3]  # a shrink whose rows move down: in place (in the buffer grown at CHUNK)
    assert rest[4] != rest[5]  # rows grow from two to three: a new buffer


def test_kv_cache_index_select_equals_a_gather_for_any_index():
    """Whatever the index (reorders, repeats, drops, more rows than before; in place or through the
    spare buffer), the kept histories are exactly the gathered rows of the old ones, also in a
    second reorder (the buffers swap); the indices beam search makes (children in the rows of
    parents that stay put, or the rows of utterances that go on moving down) are done in place."""
    from asr.model.kv_cache import KVCache

    g = torch.Generator().manual_seed(3)

    def pick(k: int, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=g)[:k].sort().values

    for trial in range(300):
        rows, t = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
        cache = KVCache(2)
        for _ in range(t):
            for layer in range(2):
                cache.slots()[layer].append(torch.randn(rows, 2, 2, 3, generator=g))
            cache.advance()
        for _ in range(2):
            hist, before = cache._buf[:, : cache.length].clone(), cache._buf.data_ptr()
            kind = trial % 3
            if kind == 0:  # beam search's reorder: rows of parents stay, the others copy a parent's
                parents = pick(int(torch.randint(1, rows + 1, (1,), generator=g)), rows)
                index = parents[torch.randint(0, parents.numel(), (rows,), generator=g)]
                index[parents] = parents
            elif kind == 1:  # utterances stop: the rows that go on move down
                index = pick(int(torch.randint(1, rows + 1, (1,), generator=g)), rows)
            else:
                index = torch.randint(0, rows, (int(torch.randint(1, rows + 3, (1,), generator=g)),), generator=g)
            cache = cache.index_select(index)
            assert torch.equal(cache._buf[:, : cache.length], hist[index]), (trial, index)
            if kind < 2:
                assert cache._buf.data_ptr() == before, (trial, index)  # in place
            rows = index.numel()


def test_kv_cache_under_cpu_bf16_autocast_keeps_fp32():
    """Under bf16 autocast on a CPU the cache holds fp32 (single-query attention runs in fp32 there)
    and stepping still follows bf16 teacher forcing to bf16 accuracy."""
    model = small_model()
    feats, lens = torch.randn(2, 30, 80), torch.tensor([30, 17])
    tokens = torch.randint(2, 22, (2, 6))
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        mem, ml = model.encode(feats, lens)
        full = model.decoder(tokens, mem, ml).float()
        cache = model.decoder.init_cache(mem, ml)
        steps = []
        for t in range(tokens.shape[1]):
            logits, cache = model.decoder.step(tokens[:, t], cache)
            steps.append(logits.float())
    assert cache.self_kv._buf.dtype == torch.float32 and steps[0].dtype == torch.float32
    assert (torch.stack(steps, 1) - full).abs().max() <= 0.1 * full.abs().max()


def test_attention_matches_formula():
    torch.manual_seed(1)
    d, h = 32, 4
    attn = MultiHeadAttention(d, h).eval()
    x = torch.randn(3, 7, d)
    lens = torch.tensor([7, 4, 2])
    keep = lengths_to_keep_mask(lens)[:, None, None, :] & causal_keep_mask(7)  # (B, 1, 7, 7)
    out = attn(x, keep)
    q, k, v = attn.qkv(x).chunk(3, dim=-1)

    def heads(t):
        return t.view(3, 7, h, d // h).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
    scores = scores.masked_fill(~keep, float("-inf"))
    ref = (scores.softmax(-1) @ v).transpose(1, 2).reshape(3, 7, d)
    ref = attn.out(ref)
    assert (out - ref).abs().max() <= TOL


def test_losses_and_accuracy():
    model = small_model()
    feats = torch.randn(2, 60, 80)
    feat_lens = torch.tensor([60, 44])
    tokens = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    token_lens = torch.tensor([4, 2])
    ys_in, ys_out = model.decoder_io(tokens, token_lens)
    eos = model.eos_id
    assert ys_in.tolist() == [[eos, 5, 6, 7, 8], [eos, 9, 10, 0, 0]]
    assert ys_out.tolist() == [[5, 6, 7, 8, eos], [9, 10, eos, -1, -1]]
    out = model(feats, feat_lens, tokens, token_lens)
    w = model.cfg.ctc_weight
    assert torch.allclose(out["loss"], (1 - w) * out["loss_att"] + w * out["loss_ctc"])
    assert out["num_tokens"] == 8 and 0 <= out["acc"] <= 1
    # the attention loss is label-smoothed cross-entropy summed per utterance, averaged over the batch
    mem, ml = model.encode(feats, feat_lens)
    logits = model.decoder(ys_in, mem, ml)
    ref = F.cross_entropy(logits.flatten(0, 1), ys_out.flatten(), ignore_index=-1, label_smoothing=0.1, reduction="sum")
    assert torch.allclose(out["loss_att"], ref / 2, atol=1e-5)
    out["loss"].backward()
    assert all(p.grad is not None for p in model.decoder.parameters())
    assert model.decoder.embed.weight.grad.abs().sum() > 0  # tied input/output embedding


def test_pure_ctc_model_has_no_decoder():
    model = small_model(ctc_weight=1.0)
    model2 = ASRModel(ModelConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=1, decoder_layers=0,
                                  vocab_size=10, ctc_weight=1.0))
    assert model2.decoder is None
    out = model2(torch.randn(1, 40, 80), torch.tensor([40]), torch.tensor([[3, 4]]), torch.tensor([2]))
    assert out["loss"] > 0 and model(torch.randn(1, 40, 80), torch.tensor([40]), torch.tensor([[3]]),
                                     torch.tensor([1]))["loss"] > 0


def test_utterance_cmn_removes_a_constant_gain():
    model = small_model(utterance_cmn=True)
    feats = torch.randn(1, 50, 80)
    lens = torch.tensor([50])
    with torch.no_grad():
        a, _ = model.encode(feats, lens)
        b, _ = model.encode(feats + 2.3, lens)  # a gain change is a constant shift of every log-mel bin
    assert (a - b).abs().max() <= 1e-4
