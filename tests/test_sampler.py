"""DynamicBucketSampler: frame budget, exactly-once epochs, determinism, DDP sharding, mid-epoch resume."""

from __future__ import annotations

import random

import pytest

from asr.data.sampler import DynamicBucketSampler, duration_to_frames


def durations(n: int = 257, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [round(rng.uniform(0.5, 20.0), 3) for _ in range(n)]


def make(durs, world_size=1, rank=0, **kw) -> DynamicBucketSampler:
    args = dict(max_frames=6000, max_utterances=16, num_buckets=10, seed=7)
    args.update(kw)
    return DynamicBucketSampler(durs, rank=rank, world_size=world_size, **args)


def test_duration_to_frames():
    assert duration_to_frames(1.0) == 100
    assert duration_to_frames(1.001) == 101
    assert duration_to_frames(0.0) == 1


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_utterance_once_disjoint_equal_counts(world_size):
    durs = durations()
    for epoch in (0, 1, 5):
        per_rank = []
        for rank in range(world_size):
            s = make(durs, world_size, rank)
            s.set_epoch(epoch)
            per_rank.append(list(s))
        counts = {len(b) for b in per_rank}
        assert len(counts) == 1, f"ranks got different numbers of batches: {[len(b) for b in per_rank]}"
        flat = [i for batches in per_rank for b in batches for i in b]
        assert sorted(flat) == list(range(len(durs))), "some utterance missing or repeated"
        # global step k of rank r is batch k*W + r of the global list
        s = make(durs, world_size, 0)
        g = s.global_batches(epoch)
        for r in range(world_size):
            assert per_rank[r] == g[r::world_size]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_batches_respect_budget(world_size):
    durs = durations()
    s = make(durs, world_size)
    frames = [duration_to_frames(d) for d in durs]
    for b in s.global_batches(3):
        assert 1 <= len(b) <= 16
        assert len(b) * max(frames[i] for i in b) <= 6000


def test_oversized_utterance_alone():
    durs = [1.0, 2.0, 90.0, 3.0]
    s = make(durs, max_frames=1000)
    batches = s.global_batches(0)
    assert [2] in batches
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]


def test_order_pure_function_of_seed_and_epoch():
    durs = durations()
    a, b = make(durs), make(durs)
    b.set_epoch(4)
    list(b)  # iterating another epoch first changes nothing
    assert a.global_batches(2) == b.global_batches(2)
    assert a.global_batches(2) != a.global_batches(3)
    assert make(durs, seed=8).global_batches(2) != a.global_batches(2)


def test_no_shuffle_is_sorted_and_stable():
    durs = durations(50)
    s = make(durs, shuffle=False)
    flat = [i for b in s.global_batches(0) for i in b]
    frames = [duration_to_frames(d) for d in durs]
    assert [frames[i] for i in flat] == sorted(frames)
    assert s.global_batches(0) == s.global_batches(9)


def test_split_rule_makes_counts_divisible():
    # 5 utterances of equal length, 1 batch of 5 naturally: 3 ranks need 3 batches.
    durs = [1.0] * 5
    for w in (2, 3, 4, 5):
        g = make(durs, w, max_frames=10_000).global_batches(0)
        assert len(g) % w == 0
        assert sorted(i for b in g for i in b) == list(range(5))
    with pytest.raises(ValueError, match="cannot give each of 6 ranks"):
        make(durs, 6)


def test_singleton_batches_repeat_to_fill_last_step(caplog):
    durs = [5.0] * 5  # 500 frames each, max_frames 600: one utterance per batch
    g = make(durs, 2, max_frames=600).global_batches(0)
    assert len(g) == 6 and g[5] == g[0]
    assert sorted(i for b in g[:5] for i in b) == list(range(5))
    assert "repeating 1" in caplog.text


def test_only_last_batch_is_short():
    durs = [3.0] * 100  # 300 frames: 20 fit in 6000, max_utterances 16
    g = make(durs, num_buckets=30).global_batches(0)
    sizes = sorted(len(b) for b in g)
    assert sizes == [4] + [16] * 6


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_mid_epoch_resume_sees_exactly_the_rest(world_size):
    durs = durations()
    for rank in range(world_size):
        full = make(durs, world_size, rank)
        full.set_epoch(2)
        expected = list(full)
        run = make(durs, world_size, rank)
        run.set_epoch(2)
        it = iter(run)
        seen = [next(it) for _ in range(5)]
        state = run.state_dict()
        assert state["pos"] == 5 and state["epoch"] == 2
        resumed = make(durs, world_size, rank)
        resumed.load_state_dict(state)
        resumed.set_epoch(2)  # the training loop calls it again: the position survives
        rest = list(resumed)
        assert seen + rest == expected
        resumed.set_epoch(3)  # the next epoch starts from its beginning
        assert len(list(resumed)) == len(resumed)


def test_state_dict_counts_consumed_batches_not_prefetched():
    s = make(durations())
    it = iter(s)
    for _ in range(8):  # a DataLoader with workers pulls ahead
        next(it)
    assert s.state_dict(batches_done=3)["pos"] == 3


def test_load_state_dict_mismatch_errors():
    durs = durations()
    state = make(durs, 2, 0).state_dict(batches_done=4)
    with pytest.raises(ValueError, match="world_size=2"):
        make(durs, 3, 0).load_state_dict(state)
    with pytest.raises(ValueError, match="utterances"):
        make(durs[:-1], 2, 0).load_state_dict(state)
    epoch_end = make(durs, 2, 0).state_dict(batches_done=0)
    make(durs, 3, 0).load_state_dict(epoch_end)  # fine at an epoch boundary


def test_padding_ratio_small_with_buckets():
    durs = durations(2000)
    bucketed = make(durs, num_buckets=30, max_frames=20_000, max_utterances=64).padding_ratio()
    one_bucket = make(durs, num_buckets=1, max_frames=20_000, max_utterances=64).padding_ratio()
    assert 0.0 <= bucketed < 0.1
    assert bucketed < one_bucket / 3
    assert make([2.0] * 40).padding_ratio() == 0.0
