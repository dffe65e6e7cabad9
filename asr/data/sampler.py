"""Duration-bucketed dynamic batches: little padding, a fixed frame budget, exact resume, DDP.

Utterances are sorted by duration and cut into ``num_buckets`` buckets of equal count. Each epoch,
every bucket is shuffled, the buckets are laid end to end from shortest to longest, and that
sequence is cut greedily into batches whose *padded* size, ``len(batch) * longest_frames``, stays
within ``max_frames`` (10 ms frames) and whose length stays within ``max_utterances`` (a batch may
straddle two neighbouring buckets, so only the very last batch is short); then the batches are
shuffled. More buckets: less padding, less randomness in who shares a batch. The order is a pure
function of ``(seed, epoch)``: nothing else (no global RNG, no wall clock) enters it.

Under DDP the global list of batches is dealt round-robin: rank ``r`` gets batches ``r, r + W,
r + 2W, ...``, so global step ``k`` is batches ``kW .. kW + W - 1``. To give every rank the same
number of batches without losing or repeating an utterance, the rule is: **while the number of
batches is not a multiple of the world size, split the batch with the most utterances in two**.
Every utterance is therefore used exactly once per epoch on exactly one rank. Only when every batch
already holds a single utterance (each one fills ``max_frames`` alone) is splitting impossible;
then the first batches of the epoch are repeated at its end to fill the last step (a warning says
how many). Fewer utterances than ranks is a ``ValueError``.

An utterance longer than ``max_frames`` on its own still gets a batch of one (and a warning at
construction); filter such utterances at load time (``data.max_duration``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = ["DynamicBucketSampler", "duration_to_frames", "pack_batches"]

log = logging.getLogger(__name__)

FRAME_SHIFT_S = 0.01


def pack_batches(
    indices: list[int], frames: Sequence[int], max_frames: int, max_utterances: int
) -> list[list[int]]:
    """Greedy cut of ``indices`` in order: extend the batch while (count + 1) * longest stays
    within ``max_frames`` padded frames and the count within ``max_utterances``."""
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in indices:
        f = int(frames[i])
        if cur and ((len(cur) + 1) * max(longest, f) > max_frames or len(cur) >= max_utterances):
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, f)
    if cur:
        out.append(cur)
    return out


def duration_to_frames(duration: float) -> int:
    """10 ms frames an utterance of ``duration`` seconds occupies (an upper bound on fbank's count)."""
    return max(1, math.ceil(duration / FRAME_SHIFT_S - 1e-6))


class DynamicBucketSampler:
    """Batch sampler (yields lists of dataset indices) bounded by padded frames and utterance count.

    Use as ``DataLoader(dataset, batch_sampler=sampler)``; call :meth:`set_epoch` before each
    epoch. :meth:`state_dict` / :meth:`load_state_dict` record and restore the position inside an
    epoch, so a resumed run sees exactly the batches it had not yet seen.
    """

    def __init__(
        self,
        durations: Sequence[float],
        max_frames: int,
        max_utterances: int,
        num_buckets: int = 30,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
    ):
        if max_frames <= 0 or max_utterances <= 0 or num_buckets <= 0:
            raise ValueError(
                f"DynamicBucketSampler: max_frames, max_utterances and num_buckets must be positive, "
                f"got {max_frames}, {max_utterances}, {num_buckets}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"DynamicBucketSampler: rank {rank} is not in [0, world_size={world_size})")
        if len(durations) < world_size:
            raise ValueError(
                f"DynamicBucketSampler: {len(durations)} utterances cannot give each of {world_size} ranks a batch"
            )
        self.frames = torch.tensor([duration_to_frames(d) for d in durations], dtype=torch.long)  # (N,)
        self.max_frames = int(max_frames)
        self.max_utterances = int(max_utterances)
        self.seed = int(seed)
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.epoch = 0
        self.pos = 0  # batches of this rank already handed out in the current epoch
        # Buckets: equal-count slices of the utterances sorted by duration (stable, so ties keep index order).
        order = torch.argsort(self.frames, stable=True)
        self.buckets = [b for b in torch.tensor_split(order, min(num_buckets, len(order))) if b.numel()]
        too_long = int((self.frames > self.max_frames).sum())
        if too_long:
            log.warning(
                "%d utterance(s) are longer than max_frames=%d on their own; each gets a batch of one",
                too_long,
                self.max_frames,
            )
        self._cache: tuple[int, list[list[int]]] | None = None

    # ------------------------------------------------------------------ the batches of an epoch
    def global_batches(self, epoch: int | None = None) -> list[list[int]]:
        """All ranks' batches of ``epoch`` in step order (rank r takes every W-th from r)."""
        epoch = self.epoch if epoch is None else epoch
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order: list[int] = []
        for bucket in self.buckets:
            order.extend((bucket[torch.randperm(len(bucket), generator=g)] if self.shuffle else bucket).tolist())
        batches = self._cut(order)
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        batches = self._split_to_multiple(batches)
        self._cache = (epoch, batches)
        return batches

    def _cut(self, indices: list[int]) -> list[list[int]]:
        return pack_batches(indices, self.frames.tolist(), self.max_frames, self.max_utterances)

    def _split_to_multiple(self, batches: list[list[int]]) -> list[list[int]]:
        """Split the largest batches in two until every rank gets the same number (see module doc)."""
        while len(batches) % self.world_size:
            k = max(range(len(batches)), key=lambda i: (len(batches[i]), -i))
            b = batches[k]
            if len(b) < 2:  # every batch is one utterance: repeat the first ones (see module doc)
                extra = self.world_size - len(batches) % self.world_size
                log.warning("every batch holds one utterance; repeating %d to fill the last DDP step", extra)
                return batches + batches[:extra]
            half = len(b) // 2
            batches[k : k + 1] = [b[:half], b[half:]]
        return batches

    def rank_batches(self, epoch: int | None = None) -> list[list[int]]:
        """This rank's batches of ``epoch``."""
        return self.global_batches(epoch)[self.rank :: self.world_size]

    # ------------------------------------------------------------------ sampler protocol
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch to iterate next; keeps a restored mid-epoch position for the same epoch."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.pos = 0

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.rank_batches()
        while self.pos < len(batches):
            b = batches[self.pos]
            self.pos += 1
            yield b
        self.pos = 0  # iterating again without set_epoch repeats the epoch, as DistributedSampler does

    def __len__(self) -> int:
        """Batches this rank yields in the current epoch (all of them, from the epoch's start)."""
        return len(self.rank_batches())

    def state_dict(self, batches_done: int | None = None) -> dict[str, Any]:
        """Position as plain ints. ``batches_done``: batches actually consumed this epoch (a
        DataLoader with workers pulls batches ahead of the training loop, so the loop counts)."""
        return {
            "epoch": self.epoch,
            "pos": self.pos if batches_done is None else int(batches_done),
            "seed": self.seed,
            "world_size": self.world_size,
            "num_utterances": int(self.frames.numel()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position; the data and world size must be those it was saved with."""
        if int(state["num_utterances"]) != self.frames.numel():
            raise ValueError(
                f"sampler state is for {state['num_utterances']} utterances, this data set has "
                f"{self.frames.numel()} (did the manifest or the filters change since the checkpoint?)"
            )
        if int(state["seed"]) != self.seed:
            raise ValueError(f"sampler state has seed {state['seed']}, this sampler {self.seed}")
        if int(state["pos"]) and int(state["world_size"]) != self.world_size:
            raise ValueError(
                f"sampler state was saved mid-epoch with world_size={state['world_size']}; resume with the same "
                f"number of processes, or from an epoch-end checkpoint (now world_size={self.world_size})"
            )
        self.epoch = int(state["epoch"])
        self.pos = int(state["pos"])

    # ------------------------------------------------------------------ diagnostics
    def padding_ratio(self, epoch: int | None = None) -> float:
        """Share of the padded frames of an epoch's batches (all ranks) that are padding."""
        padded = real = 0
        for b in self.global_batches(epoch):
            f = self.frames[b]
            padded += int(f.max()) * len(b)
            real += int(f.sum())
        return 1.0 - real / padded if padded else 0.0
