"""The training loop, top to bottom in one file: DDP, mixed precision, accumulation, checkpoints, resume.

    asr train --config C.yaml --out exp/NAME [--set train.lr=0.001 ...] [--resume]
    torchrun --nproc-per-node 8 -m asr train --config C.yaml --out exp/NAME

One process per device; DDP is set up from torchrun's environment (NCCL on GPUs, gloo on CPU).
Only rank 0 writes files and logs; every decision that ranks must share (how many utterances a
step normalises by, whether a step was bad, whether to stop) is one small all-reduce per step.

A step's loss is the sum of per-utterance losses over the *global* batch (all ranks, all
accumulated micro-batches) divided by its utterance count, so N processes with batches b_1..b_N
train exactly as one process accumulating b_1..b_N.

Exact resume: a checkpoint holds the model, optimiser, scheduler, scaler, the sampler's position
inside the epoch, every RNG (python, numpy, torch, CUDA, the SpecAugment generator; per rank),
the step, epoch and config. DataLoader worker seeds are a pure function of (seed, epoch), and the
dataset draws speed-perturbation factors from (seed, epoch, utterance). A run killed at any point
and started again with the same command ends with bit-identical weights.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from . import speed
from .atomic import atomic_write_text, remove_stale_temporaries
from .checkpoint import (
    CMVN_FILE,
    CONFIG_FILE,
    atomic_save,
    checkpoint_path,
    load_latest_checkpoint,
    prune_checkpoints,
    save_model_dir,
)
from .config import Config, ConfigError, TrainConfig, save_config
from .hardware import autocast, cpu_info, resolve_precision

__all__ = ["train", "lr_factor", "setup_distributed", "word_errors", "TrainingAborted", "LOG_FILE"]

log = logging.getLogger(__name__)

LOG_FILE = "train_log.jsonl"
CMVN_MAX_UTTERANCES = 2000  # CMVN from a fixed random subset of the training set: plenty for 80 means/variances
SKIP_CHECK_MIN = 1000  # files seen in an epoch before data.max_skip_ratio is checked mid-epoch


class TrainingAborted(RuntimeError):
    """Training stopped on a fault (too many bad steps, too many unreadable files)."""


# ----------------------------------------------------------------------------- small pieces
@dataclass
class DistEnv:
    """Where this process sits: rank, world size, device. World size 1 when not under torchrun."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str = "auto") -> DistEnv:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1), else a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if use_cuda and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available on this machine")
    if use_cuda:
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return DistEnv(rank, world, local, dev)


def lr_factor(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Learning rate / ``train.lr`` after ``step`` optimiser steps (``step`` counts from 0).

    noam: ESPnet's WarmupLR, ``min(s / w, sqrt(w / s))`` with s = step + 1, peak 1 at s = w;
    cosine: linear warmup, then half a cosine down to ``min_lr`` at ``total_steps``;
    constant: linear warmup, then 1.
    """
    s = step + 1
    w = cfg.warmup_steps
    if cfg.scheduler == "noam":
        return min(s / w, math.sqrt(w / s)) if w > 0 else 1.0 / math.sqrt(s)
    if s < w:
        return s / w
    if cfg.scheduler == "constant":
        return 1.0
    floor = cfg.min_lr / cfg.lr
    progress = min(1.0, (s - w) / max(1, total_steps - w))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def rng_state(specaug: torch.Generator) -> dict[str, Any]:
    """Every RNG this process draws from, as tensors and plain types (``weights_only`` loadable)."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *map(float, np_state[2:])],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "specaugment": specaug.get_state(),
    }


def set_rng_state(state: dict[str, Any], specaug: torch.Generator) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    specaug.set_state(state["specaugment"])


def all_reduce(values: list[float], env: DistEnv, op: str = "sum") -> list[float]:
    """Sum (or max) a few numbers over ranks: one small collective; float64 so counts stay exact."""
    t = torch.tensor(values, dtype=torch.float64)
    if env.world_size > 1:
        if env.device.type == "cuda":
            t = t.to(env.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.cpu().tolist()


class StopFlag:
    """SIGTERM/SIGINT set a flag that the loop checks after each step (save, then exit cleanly).
    A second SIGINT interrupts at once."""

    def __init__(self):
        self.signum = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        for s in (signal.SIGTERM, signal.SIGINT):
            self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: finishing this step, saving a checkpoint, exiting", signal.Signals(signum).name)

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


class MetricsLog:
    """JSON Lines (and TensorBoard when installed) on rank 0. On resume, records after the
    checkpoint's step are dropped, so the log reads as one uninterrupted run."""

    def __init__(self, exp: Path, resume_step: int | None):
        self.path = exp / LOG_FILE
        if resume_step is not None and self.path.is_file():
            keep = [ln for ln in self.path.read_text().splitlines() if _logged_step(ln) <= resume_step]
            atomic_write_text(self.path, "".join(ln + "\n" for ln in keep))
        self.f = open(self.path, "a")
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(exp / "tensorboard"), purge_step=resume_step)
        except ImportError:
            log.debug("tensorboard not installed: JSON Lines log only")

    def write(self, record: dict[str, Any]) -> None:
        self.f.write(json.dumps(record) + "\n")
        self.f.flush()
        if self.tb is not None:
            for k, v in record.items():
                if k not in ("step", "epoch", "time", "kind") and isinstance(v, int | float):
                    self.tb.add_scalar(f"{record['kind']}/{k}", v, record["step"])

    def close(self) -> None:
        self.f.close()
        if self.tb is not None:
            self.tb.close()


def _logged_step(line: str) -> float:
    """Step of a log line; a torn last line (the process was killed mid-write) counts as after any step."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return math.inf


def word_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(edit distance in words, reference words) of two normalised transcripts (``asr.scoring``'s)."""
    from .scoring import edit_distance

    r = ref.split()
    return edit_distance(r, hyp.split()), len(r)


# ----------------------------------------------------------------------------- data
def build_data(cfg: Config, tokenizer, model) -> dict[str, tuple[list[dict], Any] | None]:
    """Filtered train/dev records and their datasets (``{"train": (records, dataset), "dev": ...}``)."""
    from .data.dataset import ASRDataset, filter_records
    from .data.manifest import read_manifest

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


def make_loader(dataset, sampler, cfg: Config, epoch: int, device: torch.device):
    """A DataLoader for one epoch. Its worker seeds come from its own generator seeded by
    (seed, epoch): creating it draws nothing from the global RNG, so resuming changes nothing."""
    from .data.dataset import collate

    n = cfg.data.num_workers
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=n,
        pin_memory=device.type == "cuda",
        generator=torch.Generator().manual_seed(cfg.train.seed * 1_000_003 + epoch),
        prefetch_factor=4 if n > 0 else None,
    )


def compute_cmvn(records: list[dict], cfg: Config):
    """Global CMVN statistics from a fixed random subset (``CMVN_MAX_UTTERANCES``) of the training set."""
    from .data.dataset import compute_cmvn_stats

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


# ----------------------------------------------------------------------------- validation
@torch.no_grad()
def validate(model, loader, records_by_id, tokenizer, cfg: Config, env: DistEnv, precision: str) -> dict[str, float]:
    """Dev loss (per utterance, as in training), token accuracy, greedy WER; summed over ranks."""
    from .decode import greedy_search
    from .text import normalize

    model.eval()
    loss_sum = utts = correct = tokens = errors = words = 0.0
    for batch in loader:
        if batch.feats.shape[0] == 0:
            continue
        feats, feat_lens = batch.feats.to(env.device), batch.feat_lens.to(env.device)
        toks, tok_lens = batch.tokens.to(env.device), batch.token_lens.to(env.device)
        with autocast(precision, env.device):
            out = model(feats, feat_lens, toks, tok_lens)
            b = feats.shape[0]
            loss_sum += float(out["loss"]) * b
            utts += b
            if "num_tokens" in out:
                correct += float(out["acc"]) * float(out["num_tokens"])
                tokens += float(out["num_tokens"])
            if cfg.train.dev_wer and model.decoder is not None:
                memory, mem_lens = model.encode(feats, feat_lens)
                hyps = greedy_search(model, memory, mem_lens, max_len_ratio=cfg.decode.max_len_ratio)
                for uid, hyp in zip(batch.ids, hyps, strict=True):
                    ref = normalize(records_by_id[uid]["text"], cfg.data.normalizer)
                    e, n = word_errors(ref, normalize(tokenizer.decode(hyp), cfg.data.normalizer))
                    errors += e
                    words += n
    loss_sum, utts, correct, tokens, errors, words = all_reduce([loss_sum, utts, correct, tokens, errors, words], env)
    model.train()
    metrics = {"dev_loss": loss_sum / max(utts, 1), "dev_acc": correct / max(tokens, 1)}
    if cfg.train.dev_wer and words > 0:
        metrics["dev_wer"] = 100.0 * errors / words
    return metrics


# ----------------------------------------------------------------------------- the run
def train(cfg: Config, out: str | os.PathLike, resume: bool = False, device: str = "auto") -> dict[str, Any]:
    """Train ``cfg`` into the experiment directory ``out``; continue from its newest checkpoint if
    it has one (``resume=True`` insists that it does). Returns a summary (step, epoch, metrics).
    Exits early, after saving a checkpoint, on SIGTERM/SIGINT (``summary["stopped_by"]``)."""
    joined = dist.is_available() and dist.is_initialized()
    env = setup_distributed(device)
    summary = _train(cfg, Path(out), resume, env)
    if not joined and dist.is_available() and dist.is_initialized():
        # Leave the group we joined, on success only (every rank has passed the final barrier): a gloo
        # group left to interpreter exit aborts the process now and then ("terminate called without
        # an active exception"); after an error the launcher tears the job down instead.
        dist.destroy_process_group()
    return summary


def _train(cfg: Config, exp: Path, resume: bool, env: DistEnv) -> dict[str, Any]:
    from tqdm import tqdm

    from .data.dataset import add_noise, check_skip_ratio, spec_augment, tempo_perturb
    from .data.sampler import DynamicBucketSampler
    from .model import ASRModel
    from .model.cmvn import CMVNStats
    from .text import Tokenizer

    tcfg = cfg.train
    precision = resolve_precision(tcfg.precision, env.device)

    # --- where we start: a checkpoint of this experiment, or nothing
    if env.is_main:
        for folder in (exp, exp / "checkpoints"):  # what a writer killed mid-write left behind
            remove_stale_temporaries(folder)
    found = load_latest_checkpoint(exp, "cpu")
    if resume and found is None:
        raise FileNotFoundError(f"{exp}: --resume given but there is no checkpoint to resume from")
    ck = found[1] if found else None
    if ck is not None:
        _check_same_model(ck["config"]["model"], cfg, exp)
        if env.is_main:
            log.info("resuming %s from %s (epoch %d, step %d)", exp, found[0].name, ck["epoch"], ck["step"])

    # --- tokenizer, vocabulary, model directory files
    tokenizer = Tokenizer.load(cfg.data.tokenizer or exp)
    if cfg.model.vocab_size not in (0, tokenizer.vocab_size):
        raise ConfigError(
            f"model.vocab_size: {cfg.model.vocab_size}, but the tokenizer {tokenizer.model_path} has "
            f"{tokenizer.vocab_size} ids; leave it 0 to take the tokenizer's"
        )
    cfg.model.vocab_size = tokenizer.vocab_size
    torch.manual_seed(tcfg.seed)  # the same initial weights on every rank
    model = ASRModel(cfg.model).to(env.device)
    rank_seed = tcfg.seed * 1_000_003 + 1 + env.rank  # then a stream per rank (dropout differs across ranks)
    torch.manual_seed(rank_seed)
    random.seed(rank_seed)
    np.random.seed(rank_seed % 2**32)
    data = build_data(cfg, tokenizer, model)
    train_records, train_ds = data["train"]

    cmvn_path = exp / CMVN_FILE
    if env.is_main:
        exp.mkdir(parents=True, exist_ok=True)
        save_config(cfg, exp / CONFIG_FILE)
        if Path(tokenizer.model_path).resolve() != (exp / "tokenizer.model").resolve():
            import shutil

            shutil.copyfile(tokenizer.model_path, exp / "tokenizer.model")
        if not cmvn_path.is_file():
            stats = CMVNStats.load(cfg.data.cmvn) if cfg.data.cmvn else compute_cmvn(train_records, cfg)
            stats.save(cmvn_path)
    if env.world_size > 1:
        dist.barrier()
    model.cmvn.load_stats(CMVNStats.load(cmvn_path))

    # --- sampler, optimiser, schedule, scaler
    # Speed perturbation lengthens audio by up to 1/min(factor): budget batches for the longest case.
    stretch = 1.0 / min(cfg.data.speed_perturb) if cfg.data.speed_perturb else 1.0
    sampler = DynamicBucketSampler(
        [r["duration"] * stretch for r in train_records],
        cfg.data.max_frames,
        cfg.data.max_utterances,
        cfg.data.num_buckets,
        seed=tcfg.seed,
        rank=env.rank,
        world_size=env.world_size,
        shuffle=True,
    )
    steps_per_epoch = math.ceil(len(sampler) / tcfg.accum_grad)
    total_steps = tcfg.max_steps or steps_per_epoch * tcfg.epochs
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": tcfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt_cls = torch.optim.AdamW if tcfg.optimizer == "adamw" else torch.optim.Adam
    optimizer = opt_cls(groups, lr=tcfg.lr, betas=tuple(tcfg.betas), eps=tcfg.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, tcfg, total_steps))
    scaler = torch.amp.GradScaler(env.device.type, enabled=precision == "fp16")
    specaug_gen = torch.Generator().manual_seed(tcfg.seed * 1_000_003 + env.rank)

    step = 0
    epoch = 0
    best: list[dict[str, Any]] = []
    # skipped/seen files count the current epoch (data.max_skip_ratio is a share of an epoch)
    counters = {"bad_steps": 0, "oom_batches": 0, "skipped_files": 0, "seen_files": 0}
    if ck is not None:
        _check_same_shapes(ck["model"], model, found[0])
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        scheduler.load_state_dict(ck["scheduler"])
        scaler.load_state_dict(ck["scaler"])
        sampler.load_state_dict(ck["sampler"])
        step, epoch, best = ck["step"], ck["epoch"], ck["best"]
        counters.update(ck["counters"])
        if ck["world_size"] == env.world_size:
            set_rng_state(ck["rng"][env.rank], specaug_gen)
        else:
            log.warning("checkpoint from %d processes, now %d: RNG streams restart", ck["world_size"], env.world_size)
    raw_model = model
    if env.world_size > 1:
        model = DDP(model, device_ids=[env.local_rank] if env.device.type == "cuda" else None)

    if data["dev"] is not None:
        dev_records, dev_ds = data["dev"]
        dev_sampler = DynamicBucketSampler(
            [r["duration"] for r in dev_records],
            cfg.data.max_frames,
            cfg.data.max_utterances,
            cfg.data.num_buckets,
            seed=tcfg.seed,
            rank=env.rank,
            world_size=env.world_size,
            shuffle=False,
        )
        dev_by_id = {r["id"]: r for r in dev_records}

    metrics_log = MetricsLog(exp, step if ck is not None else None) if env.is_main else None
    if env.is_main:  # what this run computes with (a resumed run adds its own record)
        metrics_log.write({"kind": "setup", "step": step, "epoch": epoch, "precision": precision,
                           "device": str(env.device), "world_size": env.world_size, "cpu": cpu_info().summary(),
                           "speed_paths": speed.active(), "torch": torch.__version__, "time": time.time()})  # fmt: skip
        log.info(
            "model %s parameters, %d train utterances (%.1f h), %d batches/epoch/rank (%.1f%% padding), "
            "precision %s, %d process(es)",
            f"{raw_model.num_parameters():,}",
            len(train_records),
            sum(r["duration"] for r in train_records) / 3600,
            len(sampler),
            100 * sampler.padding_ratio(),
            precision,
            env.world_size,
        )

    def save(kind: str, batches_done: int, metrics: dict[str, float] | None = None) -> None:
        """Checkpoint (all ranks take part: RNG states are gathered), written by rank 0."""
        nonlocal best
        states = [rng_state(specaug_gen)]
        if env.world_size > 1:
            gathered: list[Any] = [None] * env.world_size
            dist.all_gather_object(gathered, states[0])
            states = gathered
        if not env.is_main:
            return
        number = epoch if kind == "epoch" else step  # epoch: the number of finished epochs
        path = checkpoint_path(exp, kind, number)
        if metrics and tcfg.best_metric in metrics:
            best = _update_best(best, path.name, metrics[tcfg.best_metric], epoch, step, tcfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save(
            {
                "model": raw_model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict(),
                "sampler": sampler.state_dict(batches_done),
                "rng": states,
                "world_size": env.world_size,
                "step": step,
                "epoch": epoch,
                "kind": kind,
                "metrics": metrics or {},
                "best": best,
                "best_metric": tcfg.best_metric,
                "counters": dict(counters),
                "config": cfg.to_dict(),
            },
            path,
        )
        atomic_write_text(exp / "checkpoints" / "best.json", json.dumps(best, indent=1))
        prune_checkpoints(exp, tcfg.keep_last, {b["name"] for b in best})
        log.info("saved %s", path)

    # --- the loop
    summary: dict[str, Any] = {"stopped_by": None}
    model.train()
    t_last = time.time()
    audio_since = 0.0
    bad_in_row = 0
    with StopFlag() as stop:
        while epoch < tcfg.epochs and not (tcfg.max_steps and step >= tcfg.max_steps):
            sampler.set_epoch(epoch)
            train_ds.set_epoch(epoch)
            batches_done = sampler.pos
            if batches_done == 0:
                counters["skipped_files"] = counters["seen_files"] = 0
            batches: Iterator = iter(make_loader(train_ds, sampler, cfg, epoch, env.device))
            bar = tqdm(
                total=len(sampler),
                initial=batches_done,
                desc=f"epoch {epoch + 1}",
                unit="batch",
                disable=None if env.is_main else True,
                dynamic_ncols=True,
            )
            while True:
                group = list(islice(batches, tcfg.accum_grad))
                if not group:
                    break
                # (1) the global utterance count this step normalises by; audio seconds; unreadable files
                local_utts = sum(b.feats.shape[0] for b in group)
                local_skipped = sum(b.skipped for b in group)
                local_audio = sum(sum(b.durations) for b in group)
                g_utts, g_skipped, g_audio = all_reduce([local_utts, local_skipped, local_audio], env)
                audio_since += g_audio
                counters["skipped_files"] += int(g_skipped)
                counters["seen_files"] += int(g_utts + g_skipped)
                if counters["seen_files"] >= SKIP_CHECK_MIN:  # fail early when most of the data is unreadable
                    check_skip_ratio(
                        counters["skipped_files"], counters["seen_files"], cfg.data.max_skip_ratio, f"epoch {epoch + 1}"
                    )
                # (2) forward/backward every micro-batch, gradients synchronised on the last one
                sums = torch.zeros(6, dtype=torch.float64, device=env.device)  # loss att ctc correct tokens bad
                oom = False
                for i, batch in enumerate(group):
                    sync = i == len(group) - 1
                    ctx = contextlib.nullcontext() if sync or env.world_size == 1 else model.no_sync()
                    b = batch.feats.shape[0]
                    if b:
                        batch = batch.to(env.device, non_blocking=True)
                        feats, feat_lens, toks, tok_lens = batch.feats, batch.feat_lens, batch.tokens, batch.token_lens
                        sa = cfg.data.specaugment
                        if sa is not None and sa.tempo > 0:
                            feats, feat_lens = tempo_perturb(feats, feat_lens, sa.tempo, sa.tempo_span, specaug_gen)
                        if cfg.data.noise.prob > 0:
                            feats = add_noise(feats, feat_lens, cfg.data.noise, cfg.data.sample_rate, specaug_gen)
                        if sa is not None:
                            feats = spec_augment(
                                feats, feat_lens, sa, specaug_gen, cfg.data.sample_rate
                            )
                    else:
                        feats, feat_lens, toks, tok_lens = dummy_batch(raw_model, env.device)
                    weight = b * env.world_size / max(g_utts, 1)  # DDP averages over ranks; undo, then / global
                    try:
                        with ctx:
                            with autocast(precision, env.device):
                                out = model(feats, feat_lens, toks, tok_lens)
                            scaler.scale(out["loss"] * weight).backward()
                    except torch.OutOfMemoryError as e:
                        if env.world_size > 1:  # the other ranks wait in the all-reduce: no safe way to skip
                            raise TrainingAborted(
                                f"out of memory on rank {env.rank} (batch of {b} utterances) under DDP: lower "
                                f"data.max_frames; the last checkpoint in {exp / 'checkpoints'} is kept"
                            ) from e
                        log.warning("out of memory on a batch of %d utterances (%s...): skipped", b, batch.ids[:1])
                        oom = True
                        break
                    if b:
                        loss = out["loss"].detach().double()
                        sums[0] += loss * b
                        sums[1] += out["loss_att"].double() * b
                        sums[2] += out["loss_ctc"].double() * b
                        if "num_tokens" in out:
                            sums[3] += out["acc"].double() * out["num_tokens"]
                            sums[4] += out["num_tokens"]
                        sums[5] += (~torch.isfinite(loss)).double()
                if oom:
                    optimizer.zero_grad(set_to_none=True)
                    if env.device.type == "cuda":
                        torch.cuda.empty_cache()
                    counters["oom_batches"] += 1
                    batches_done += len(group)
                    bar.update(len(group))
                    continue
                # (3) agree on the step's numbers, non-finite losses and stopping; clip; update
                loss_sum, att_sum, ctc_sum, correct, ntok, nonfinite, stop_any = all_reduce(
                    [*sums.tolist(), float(stop.signum)], env
                )
                batches_done += len(group)
                bar.update(len(group))
                bad = nonfinite > 0
                if not bad:
                    scaler.unscale_(optimizer)
                    max_norm = tcfg.grad_clip if tcfg.grad_clip > 0 else float("inf")
                    grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), max_norm)
                    # Gradients are all-reduced, so every rank sees the same norm. Under fp16 an overflow
                    # is the GradScaler's business (it skips the update and lowers the scale).
                    bad = not scaler.is_enabled() and not bool(torch.isfinite(grad_norm))
                if bad:
                    counters["bad_steps"] += 1
                    bad_in_row += 1
                    optimizer.zero_grad(set_to_none=True)
                    what = "loss" if nonfinite > 0 else "gradient"
                    log.warning("non-finite %s at step %d: step skipped (%d in a row)", what, step + 1, bad_in_row)
                    if bad_in_row >= tcfg.max_bad_steps:
                        raise TrainingAborted(
                            f"{bad_in_row} non-finite losses in a row (train.max_bad_steps={tcfg.max_bad_steps}) at "
                            f"step {step + 1}: lower train.lr, check the data, or try precision fp32; "
                            f"the last good checkpoint in {exp / 'checkpoints'} is kept"
                        )
                else:
                    bad_in_row = 0
                    scaler.step(optimizer)  # skips the update itself when fp16 gradients overflowed
                    scaler.update()
                    optimizer.zero_grad(set_to_none=True)
                    scheduler.step()
                    step += 1
                    if env.is_main:
                        lr = optimizer.param_groups[0]["lr"]
                        now = time.time()
                        rate = audio_since / max(now - t_last, 1e-9)  # seconds of audio per second, all ranks
                        bar.set_postfix(loss=f"{loss_sum / g_utts:.2f}", lr=f"{lr:.2e}", audio=f"{rate:.0f}s/s")
                        if step % tcfg.log_interval == 0:
                            rec = {
                                "kind": "train",
                                "step": step,
                                "epoch": epoch + 1,
                                "loss": loss_sum / g_utts,
                                "loss_att": att_sum / g_utts,
                                "loss_ctc": ctc_sum / g_utts,
                                "acc": correct / ntok if ntok else None,
                                "lr": lr,
                                "grad_norm": float(grad_norm),
                                "audio_s_per_s": rate,
                                "time": now,
                            }
                            metrics_log.write(rec)
                            log.info(
                                "epoch %d step %d loss %.3f acc %s lr %.3g %.0f audio-s/s",
                                epoch + 1,
                                step,
                                rec["loss"],
                                "-" if rec["acc"] is None else f"{rec['acc']:.3f}",
                                lr,
                                rec["audio_s_per_s"],
                            )
                            t_last, audio_since = now, 0.0
                if stop_any:
                    save("step", batches_done)
                    bar.close()
                    summary["stopped_by"] = signal.Signals(int(stop_any)).name
                    break
                if tcfg.max_steps and step >= tcfg.max_steps:
                    break
                if tcfg.checkpoint_interval and step % tcfg.checkpoint_interval == 0 and not bad:
                    if batches_done < len(sampler):  # at the epoch's end the epoch checkpoint follows
                        save("step", batches_done)
            bar.close()
            if summary["stopped_by"]:
                break
            # --- end of the epoch (or of max_steps): validate, checkpoint, model directory
            finished_epoch = batches_done >= len(sampler)
            if finished_epoch:
                check_skip_ratio(
                    counters["skipped_files"], counters["seen_files"], cfg.data.max_skip_ratio, f"epoch {epoch + 1}"
                )
            metrics = {}
            if data["dev"] is not None:
                dev_sampler.set_epoch(0)
                loader = make_loader(dev_ds, dev_sampler, cfg, 0, env.device)
                metrics = validate(raw_model, loader, dev_by_id, tokenizer, cfg, env, precision)
                if env.is_main:
                    metrics_log.write({"kind": "dev", "step": step, "epoch": epoch + 1, **metrics, "time": time.time()})
                    log.info("epoch %d dev: %s", epoch + 1, " ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
            if finished_epoch:
                epoch += 1
                save("epoch", 0, metrics)
            else:
                save("step", batches_done, metrics)
            if env.is_main:
                save_model_dir(exp, cfg, raw_model.state_dict())
            summary.update(metrics)
    if metrics_log is not None:
        metrics_log.close()
    if env.world_size > 1:
        dist.barrier()
    summary.update(step=step, epoch=epoch, **counters)
    return summary


SHAPE_KEYS = ("input_dim", "d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers", "frontend", "stack",
              "conv_channels", "conv_stack", "norm", "vocab_size")  # fmt: skip


def _check_same_model(saved_model: dict[str, Any], cfg: Config, exp: Path) -> None:
    """A checkpoint's weights only fit the model it was trained as: refuse a changed architecture
    (dropout, loss weights and the like may change, with a warning)."""
    for k, v in saved_model.items():
        now = getattr(cfg.model, k)
        if (k == "vocab_size" and now == 0) or now == v:
            continue
        if k in SHAPE_KEYS:
            raise ConfigError(
                f"model.{k}: {exp} was trained with {v!r}, the config now says {now!r}; "
                f"use another --out for a different model"
            )
        log.warning("model.%s changed from %r to %r since the checkpoint: the run continues with %r", k, v, now, now)


def _check_same_shapes(saved: dict[str, torch.Tensor], model: torch.nn.Module, path: Path) -> None:
    """The checkpoint's tensors fit the model the config builds: the first misfit is named."""
    own = model.state_dict()
    for name, t in own.items():
        if name not in saved:
            raise ConfigError(f"{path}: has no tensor {name!r}, which the model the config describes needs")
        if tuple(saved[name].shape) != tuple(t.shape):
            raise ConfigError(
                f"{path}: tensor {name!r} has shape {tuple(saved[name].shape)}, the model the config describes "
                f"needs {tuple(t.shape)}; use another --out for a different model"
            )
    extra = sorted(set(saved) - set(own))
    if extra:
        raise ConfigError(f"{path}: tensor {extra[0]!r} is not in the model the config describes")


def _update_best(best: list[dict], name: str, value: float, epoch: int, step: int, tcfg: TrainConfig) -> list[dict]:
    """Keep the ``keep_best`` best epoch checkpoints by ``best_metric`` (loss/WER lower, acc higher)."""
    higher = tcfg.best_metric == "dev_acc"
    entries = [b for b in best if b["name"] != name] + [{"name": name, "value": value, "epoch": epoch, "step": step}]
    entries.sort(key=lambda b: -b["value"] if higher else b["value"])
    return entries[: tcfg.keep_best]
