"""The data a training run reads: filtered train/dev sets, this rank's batches, loaders, CMVN.

``asr.training.train`` calls these once per run (and :func:`make_loader` once per epoch). Nothing here
draws from the global RNG, so building a loader again on resume changes nothing.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import torch

from asr.config import Config, ConfigError
from asr.data.cmvn import compute_cmvn_stats
from asr.data.dataset import ASRDataset, collate
from asr.data.filtering import filter_records
from asr.data.manifest import read_manifest
from asr.data.sampler import DynamicBucketSampler
from asr.training.runtime import DistEnv

__all__ = ["build_data", "make_sampler", "make_loader", "compute_cmvn", "dummy_batch", "CMVN_MAX_UTTERANCES"]

log = logging.getLogger(__name__)

CMVN_MAX_UTTERANCES = 2000  # CMVN from a fixed random subset of the training set: plenty for 80 means/variances


def build_data(cfg: Config, tokenizer, model) -> dict[str, tuple[list[dict], Any] | None]:
    """Filtered train/dev records and their datasets (``{"train": (records, dataset), "dev": ...}``)."""
    if not cfg.data.train:
        raise ConfigError("data.train: expected the training manifest (JSON Lines), got nothing")
    sets: dict[str, tuple[list[dict], Any] | None] = {}
    for name, path in (("train", cfg.data.train), ("dev", cfg.data.dev)):
        if not path:
            sets[name] = None
            continue
        train = name == "train"
        records, _ = filter_records(
            read_manifest(path),
            tokenizer,
            cfg.data,
            min_input_frames=model.min_input_frames,
            encoder_lengths=model.encoder_lengths,
            speed_perturb=cfg.data.speed_perturb if train else (),
            what=f"{name} ({path})",
        )
        if not records:
            raise ValueError(f"{path}: no utterances left after filtering (the log says why)")
        sets[name] = (records, ASRDataset(records, tokenizer, cfg.data, train=train, seed=cfg.train.seed))
    return sets


def make_sampler(durations: list[float], cfg: Config, env: DistEnv, shuffle: bool):
    """This rank's duration-bucketed batches (``data.max_frames`` padded frames, ``max_utterances``)."""
    d = cfg.data
    return DynamicBucketSampler(durations, d.max_frames, d.max_utterances, d.num_buckets, seed=cfg.train.seed,
                                rank=env.rank, world_size=env.world_size, shuffle=shuffle)  # fmt: skip


def make_loader(dataset, sampler, cfg: Config, epoch: int, device: torch.device, collate_fn=collate):
    """A DataLoader for one epoch. Its worker seeds come from its own generator seeded by
    (seed, epoch): creating it draws nothing from the global RNG, so resuming changes nothing.
    (``cfg`` needs only ``data.num_workers`` and ``train.seed``: the LM task's config has both.)"""
    n = cfg.data.num_workers
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=collate_fn,
        num_workers=n,
        pin_memory=device.type == "cuda",
        generator=torch.Generator().manual_seed(cfg.train.seed * 1_000_003 + epoch),
        prefetch_factor=4 if n > 0 else None,
    )


def compute_cmvn(records: list[dict], cfg: Config):
    """Global CMVN statistics from a fixed random subset (``CMVN_MAX_UTTERANCES``) of the training set."""
    rng = random.Random(cfg.train.seed)
    subset = records if len(records) <= CMVN_MAX_UTTERANCES else rng.sample(records, CMVN_MAX_UTTERANCES)
    stats, unreadable = compute_cmvn_stats(subset, cfg.data, num_workers=cfg.data.num_workers, progress=None)
    log.info("CMVN statistics from %d utterances (%d frames, %d unreadable)", len(subset), stats.count, len(unreadable))
    return stats


def dummy_batch(model, device: torch.device):
    """A one-utterance batch for a rank whose micro-batch lost every file: it runs forward and
    backward with weight 0 so the DDP gradient all-reduce still meets every rank."""
    t = max(model.min_input_frames, 16)
    feats = torch.zeros(1, t, model.cfg.input_dim, device=device)  # (1, T, F)
    lens = torch.tensor([t], device=device)
    return (
        feats,
        lens,
        torch.ones(1, 1, dtype=torch.long, device=device),
        torch.ones(1, dtype=torch.long, device=device),
    )
