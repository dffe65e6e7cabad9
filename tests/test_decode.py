"""Search invariants on small random-weight models: batching, caching, beam 1 vs greedy, CTC sums."""

from __future__ import annotations

import pytest
import torch
from helpers_decode import synthetic_batch, trained_tiny_model

from asr.decode import ctc_greedy_search, greedy_search
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
