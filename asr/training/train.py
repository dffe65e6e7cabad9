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

from asr import speed
from asr.atomic import atomic_write_text, remove_stale_temporaries
from asr.checkpoint import atomic_save, check_state_fits, init_files, load_init_weights
from asr.config import Config
from asr.hardware import autocast, cpu_info, resolve_precision
from asr.training.checkpoints import checkpoint_path, load_latest_checkpoint, prune_checkpoints, update_best
from asr.training.optim import build_optimizer, freeze
from asr.training.runtime import (
    LOG_FILE,
    DistEnv,
    MetricsLog,
    StopFlag,
    all_reduce,
    rng_state,
    set_rng_state,
    setup_distributed,
)
from asr.training.task import ASRTask

__all__ = ["train", "setup_distributed", "TrainingAborted", "LOG_FILE"]

log = logging.getLogger(__name__)

SKIP_CHECK_MIN = 1000  # files seen in an epoch before data.max_skip_ratio is checked mid-epoch


class TrainingAborted(RuntimeError):
    """Training stopped on a fault (too many bad steps, too many unreadable files)."""


def train(cfg: Config, out: str | os.PathLike, resume: bool = False, device: str = "auto", task=None) -> dict[str, Any]:
    """Train ``cfg`` into the experiment directory ``out``; continue from its newest checkpoint if
    it has one (``resume=True`` insists that it does). Returns a summary (step, epoch, metrics).
    Exits early, after saving a checkpoint, on SIGTERM/SIGINT (``summary["stopped_by"]``).
    ``task``: what is learnt (``asr.training.task``); the speech recogniser (:class:`ASRTask`) by default."""
    joined = dist.is_available() and dist.is_initialized()
    env = setup_distributed(device)
    summary = Trainer(cfg, Path(out), resume, env, task).run()
    if not joined and dist.is_available() and dist.is_initialized():
        # Leave the group we joined, on success only (every rank has passed the final barrier): a gloo
        # group left to interpreter exit aborts the process now and then ("terminate called without
        # an active exception"); after an error the launcher tears the job down instead.
        dist.destroy_process_group()
    return summary


@dataclass
class StepStats:
    """What one optimiser step saw, summed over ranks and micro-batches (losses summed per utterance)."""

    utts: float = 0.0  # units in the global batch (utterances; an LM's tokens): what losses are normalised by
    loss: float = 0.0
    loss_att: float = 0.0
    loss_ctc: float = 0.0
    correct: float = 0.0  # decoder tokens predicted right, and their count
    tokens: float = 0.0
    nonfinite: float = 0.0  # micro-batches whose loss was not finite
    stop: float = 0.0  # a rank received SIGTERM/SIGINT
    oom: bool = False  # this (single) process ran out of memory on a micro-batch: the step was skipped
    bad: bool = False  # non-finite loss or gradient: no update (every rank agrees)


class Trainer:
    """One training run: setup in ``__init__``, then :meth:`run` = epochs of :meth:`train_step` and
    :meth:`end_epoch`; :meth:`save` writes a checkpoint that resumes exactly. What is learnt (model,
    data, validation, model directory) comes from ``task`` (``asr.training.task``)."""

    def __init__(self, cfg: Config, exp: Path, resume: bool, env: DistEnv, task=None):
        self.task = task = task or ASRTask(cfg)
        self.cfg, self.tcfg, self.exp, self.env = cfg, cfg.train, exp, env
        tcfg = cfg.train
        self.precision = resolve_precision(tcfg.precision, env.device)
        # --- where we start: a checkpoint of this experiment, or nothing
        if env.is_main:
            for folder in (exp, exp / "checkpoints"):  # what a writer killed mid-write left behind
                remove_stale_temporaries(folder)
        found = load_latest_checkpoint(exp, "cpu")
        if resume and found is None:
            raise FileNotFoundError(f"{exp}: --resume given but there is no checkpoint to resume from")
        ck = found[1] if found else None
        if ck is not None:
            task.check_resume(ck["config"], exp)
            if env.is_main:
                log.info("resuming %s from %s (epoch %d, step %d)", exp, found[0].name, ck["epoch"], ck["step"])
        # --- model, data, the run's files (config, tokenizer, CMVN for ASR)
        torch.manual_seed(tcfg.seed)  # the same initial weights on every rank
        self.raw_model = model = task.build_model(exp, env.device)
        if ck is None and tcfg.init:
            path = init_files(tcfg.init)[0]
            fresh = load_init_weights(model, path)
            if env.is_main:
                log.info("initialised from %s (train.init)%s", path,
                         f"; new, from scratch: {', '.join(fresh)}" if fresh else "")
        frozen = freeze(model, tcfg.freeze)
        if frozen and env.is_main:
            log.info("train.freeze: %d tensors kept fixed (%s)", len(frozen), ", ".join(tcfg.freeze))
        rank_seed = tcfg.seed * 1_000_003 + 1 + env.rank  # then a stream per rank (dropout differs across ranks)
        torch.manual_seed(rank_seed)
        random.seed(rank_seed)
        np.random.seed(rank_seed % 2**32)
        self.train_ds, train_lengths, dev = task.build_data(model)
        if env.is_main:
            exp.mkdir(parents=True, exist_ok=True)
            task.write_files(exp)
        if env.world_size > 1:
            dist.barrier()
        task.load_files(exp, model)
        # --- sampler, optimiser, schedule, scaler
        self.sampler = task.sampler(train_lengths, env, shuffle=True)
        total_steps = tcfg.max_steps or math.ceil(len(self.sampler) / tcfg.accum_grad) * tcfg.epochs
        self.optimizer, self.scheduler = build_optimizer(model, tcfg, total_steps)
        self.scaler = torch.amp.GradScaler(env.device.type, enabled=self.precision == "fp16")
        self.augment_gen = torch.Generator().manual_seed(tcfg.seed * 1_000_003 + env.rank)
        self.step = self.epoch = self.bad_in_row = 0
        self.best: list[dict[str, Any]] = []
        # skipped/seen files count the current epoch (data.max_skip_ratio is a share of an epoch)
        self.counters = {"bad_steps": 0, "oom_batches": 0, "skipped_files": 0, "seen_files": 0}
        if ck is not None:
            self._restore(ck, found[0])
        self.model = DDP(model, device_ids=[env.local_rank] if env.device.type == "cuda" else None) if (
            env.world_size > 1) else model  # fmt: skip
        self.dev = None if dev is None else (dev[0], task.sampler(dev[1], env, shuffle=False))
        self.metrics_log = MetricsLog(exp, self.step if ck is not None else None) if env.is_main else None
        if env.is_main:
            self._log_setup()

    def _restore(self, ck: dict[str, Any], path: Path) -> None:
        check_state_fits(ck["model"], self.raw_model, path)
        self.raw_model.load_state_dict(ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(ck["scheduler"])
        self.scaler.load_state_dict(ck["scaler"])
        self.sampler.load_state_dict(ck["sampler"])
        self.step, self.epoch, self.best = ck["step"], ck["epoch"], ck["best"]
        self.counters.update(ck["counters"])
        if ck["world_size"] == self.env.world_size:
            set_rng_state(ck["rng"][self.env.rank], self.augment_gen)
        else:
            log.warning("checkpoint from %d processes, now %d: RNG streams restart", ck["world_size"],
                        self.env.world_size)  # fmt: skip

    def _log_setup(self) -> None:
        """What this run computes with, in the metrics log (a resumed run adds its own record) and the log."""
        env = self.env
        self.metrics_log.write({
            "kind": "setup", "step": self.step, "epoch": self.epoch, "precision": self.precision,
            "device": str(env.device), "world_size": env.world_size, "cpu": cpu_info().summary(),
            "speed_paths": speed.active(), "torch": torch.__version__, "time": time.time(),
        })  # fmt: skip
        log.info("%s, precision %s, %d process(es)", self.task.describe(self.raw_model, self.sampler), self.precision,
                 env.world_size)  # fmt: skip

    # ------------------------------------------------------------------------- checkpoints
    def save(self, kind: str, batches_done: int, metrics: dict[str, float] | None = None) -> None:
        """Checkpoint (all ranks take part: RNG states are gathered), written by rank 0."""
        env, tcfg = self.env, self.tcfg
        states = [rng_state(self.augment_gen)]
        if env.world_size > 1:
            gathered: list[Any] = [None] * env.world_size
            dist.all_gather_object(gathered, states[0])
            states = gathered
        if not env.is_main:
            return
        path = checkpoint_path(self.exp, kind, self.epoch if kind == "epoch" else self.step)  # epoch: finished ones
        if metrics and tcfg.best_metric in metrics:
            self.best = update_best(self.best, path.name, metrics[tcfg.best_metric], self.epoch, self.step, tcfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save({
            "model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
            "sampler": self.sampler.state_dict(batches_done), "rng": states, "world_size": env.world_size,
            "step": self.step, "epoch": self.epoch, "kind": kind, "metrics": metrics or {}, "best": self.best,
            "best_metric": tcfg.best_metric, "counters": dict(self.counters), "config": self.cfg.to_dict(),
        }, path)  # fmt: skip
        atomic_write_text(self.exp / "checkpoints" / "best.json", json.dumps(self.best, indent=1))
        prune_checkpoints(self.exp, tcfg.keep_last, {b["name"] for b in self.best})
        log.info("saved %s", path)

    # ------------------------------------------------------------------------- one step
    def train_step(self, group: list, stop_signal: int) -> StepStats:
        """Forward and backward of every micro-batch in ``group`` (gradients synchronised on the last),
        then, unless the loss or gradient is not finite, clipping and the optimiser update."""
        env, tcfg, task = self.env, self.tcfg, self.task
        # (1) the global count of units (utterances; an LM's tokens) this step normalises by; audio seconds
        # (tokens); utterances (sentences) and unreadable files
        local = [sum(task.units(b) for b in group), sum(b.skipped for b in group),
                 sum(task.amount(b) for b in group), sum(len(b) for b in group)]  # fmt: skip
        g_utts, g_skipped, g_audio, g_items = all_reduce(local, env)
        self.audio_since += g_audio
        self.counters["skipped_files"] += int(g_skipped)
        self.counters["seen_files"] += int(g_items + g_skipped)
        if self.counters["seen_files"] >= SKIP_CHECK_MIN:  # fail early when most of the data is unreadable
            self._check_skip_ratio()
        # (2) forward/backward every micro-batch
        sums = torch.zeros(6, dtype=torch.float64, device=env.device)  # loss att ctc correct tokens nonfinite
        for i, batch in enumerate(group):
            last = i == len(group) - 1
            b = task.units(batch)
            inputs = task.inputs(batch, env.device, self.augment_gen) if b else task.dummy_inputs(self.raw_model,
                                                                                                  env.device)
            weight = b * env.world_size / max(g_utts, 1)  # DDP averages over ranks; undo, then / global
            try:
                with contextlib.nullcontext() if last or env.world_size == 1 else self.model.no_sync():
                    with autocast(self.precision, env.device):
                        out = self.model(*inputs)
                    self.scaler.scale(out["loss"] * weight).backward()
            except torch.OutOfMemoryError as e:
                if env.world_size > 1:  # the other ranks wait in the all-reduce: no safe way to skip
                    raise TrainingAborted(
                        f"out of memory on rank {env.rank} (batch of {b} utterances) under DDP: lower "
                        f"data.max_frames; the last checkpoint in {self.exp / 'checkpoints'} is kept"
                    ) from e
                log.warning("out of memory on a batch of %d utterances (%s...): skipped", b, batch.ids[:1])
                self.optimizer.zero_grad(set_to_none=True)
                if env.device.type == "cuda":
                    torch.cuda.empty_cache()
                self.counters["oom_batches"] += 1
                return StepStats(utts=g_utts, oom=True)
            if b:
                loss = out["loss"].detach().double()
                parts = out.get("loss_att", out["loss"]), out.get("loss_ctc", torch.zeros_like(out["loss"]))
                sums[:3] += torch.stack([loss, parts[0].double(), parts[1].double()]) * b
                if "num_tokens" in out:
                    sums[3] += out["acc"].double() * out["num_tokens"]
                    sums[4] += out["num_tokens"]
                sums[5] += (~torch.isfinite(loss)).double()
        # (3) agree on the step's numbers, non-finite losses and stopping; clip; update
        stats = StepStats(g_utts, *all_reduce([*sums.tolist(), float(stop_signal)], env))
        bad = stats.nonfinite > 0
        if not bad:
            self.scaler.unscale_(self.optimizer)
            max_norm = tcfg.grad_clip if tcfg.grad_clip > 0 else float("inf")
            self.grad_norm = torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), max_norm)
            # Gradients are all-reduced, so every rank sees the same norm. Under fp16 an overflow
            # is the GradScaler's business (it skips the update and lowers the scale).
            bad = not self.scaler.is_enabled() and not bool(torch.isfinite(self.grad_norm))
        if bad:
            self._bad_step("loss" if stats.nonfinite > 0 else "gradient")
        else:
            self.bad_in_row = 0
            self.scaler.step(self.optimizer)  # skips the update itself when fp16 gradients overflowed
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            self.step += 1
        stats.bad = bad
        return stats

    def _bad_step(self, what: str) -> None:
        self.counters["bad_steps"] += 1
        self.bad_in_row += 1
        self.optimizer.zero_grad(set_to_none=True)
        log.warning("non-finite %s at step %d: step skipped (%d in a row)", what, self.step + 1, self.bad_in_row)
        if self.bad_in_row >= self.tcfg.max_bad_steps:
            raise TrainingAborted(
                f"{self.bad_in_row} non-finite losses in a row (train.max_bad_steps={self.tcfg.max_bad_steps}) at "
                f"step {self.step + 1}: lower train.lr, check the data, or try precision fp32; "
                f"the last good checkpoint in {self.exp / 'checkpoints'} is kept"
            )

    def _check_skip_ratio(self) -> None:
        from asr.data.dataset import check_skip_ratio

        c = self.counters
        ratio = getattr(self.cfg.data, "max_skip_ratio", 0.0)  # an LM's text has no unreadable files
        check_skip_ratio(c["skipped_files"], c["seen_files"], ratio, f"epoch {self.epoch + 1}")

    def _log_step(self, stats: StepStats, bar) -> None:
        """Progress bar every step, a metrics record every ``log_interval`` steps (rank 0)."""
        lr = self.optimizer.param_groups[0]["lr"]
        now = time.time()
        rate = self.audio_since / max(now - self.t_last, 1e-9)  # seconds of audio (LM: tokens) per second, all ranks
        bar.set_postfix(loss=f"{stats.loss / stats.utts:.2f}", lr=f"{lr:.2e}", rate=f"{rate:.0f}/s")
        if self.step % self.tcfg.log_interval:
            return
        n = stats.utts
        rec = {"kind": "train", "step": self.step, "epoch": self.epoch + 1, "loss": stats.loss / n,
               "loss_att": stats.loss_att / n, "loss_ctc": stats.loss_ctc / n,
               "acc": stats.correct / stats.tokens if stats.tokens else None, "lr": lr,
               "grad_norm": float(self.grad_norm), self.task.rate_key: rate, "time": now}  # fmt: skip
        self.metrics_log.write(rec)
        acc = "-" if rec["acc"] is None else f"{rec['acc']:.3f}"
        log.info("epoch %d step %d loss %.3f acc %s lr %.3g %.0f %s", self.epoch + 1, self.step, rec["loss"],
                 acc, lr, rate, self.task.rate_key)  # fmt: skip
        self.t_last, self.audio_since = now, 0.0

    # ------------------------------------------------------------------------- epochs
    def end_epoch(self, batches_done: int) -> dict[str, float]:
        """Validate, checkpoint and refresh the model directory at an epoch's end (or at max_steps)."""
        finished = batches_done >= len(self.sampler)
        if finished:
            self._check_skip_ratio()
        metrics = {}
        if self.dev is not None:
            dev_ds, dev_sampler = self.dev
            dev_sampler.set_epoch(0)
            loader = self.task.loader(dev_ds, dev_sampler, 0, self.env.device)
            metrics = self.task.validate(self.raw_model, loader, self.env, self.precision)
            if self.env.is_main:
                self.metrics_log.write({"kind": "dev", "step": self.step, "epoch": self.epoch + 1, **metrics,
                                        "time": time.time()})  # fmt: skip
                log.info("epoch %d dev: %s", self.epoch + 1, " ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        if finished:
            self.epoch += 1
            self.save("epoch", 0, metrics)
        else:
            self.save("step", batches_done, metrics)
        if self.env.is_main:
            self.task.save_model_dir(self.exp, self.raw_model.state_dict())
        return metrics

    def run(self) -> dict[str, Any]:
        """Epochs until ``train.epochs`` (or ``max_steps``), or a stop signal (checkpoint, then return)."""
        from tqdm import tqdm

        tcfg, sampler = self.tcfg, self.sampler
        summary: dict[str, Any] = {"stopped_by": None}
        self.model.train()
        self.t_last, self.audio_since = time.time(), 0.0
        with StopFlag() as stop:
            while self.epoch < tcfg.epochs and not (tcfg.max_steps and self.step >= tcfg.max_steps):
                sampler.set_epoch(self.epoch)
                self.train_ds.set_epoch(self.epoch)
                batches_done = sampler.pos
                if batches_done == 0:
                    self.counters["skipped_files"] = self.counters["seen_files"] = 0
                batches: Iterator = iter(self.task.loader(self.train_ds, sampler, self.epoch, self.env.device))
                bar = tqdm(total=len(sampler), initial=batches_done, desc=f"epoch {self.epoch + 1}", unit="batch",
                           disable=None if self.env.is_main else True, dynamic_ncols=True)  # fmt: skip
                while group := list(islice(batches, tcfg.accum_grad)):
                    stats = self.train_step(group, stop.signum)
                    batches_done += len(group)
                    bar.update(len(group))
                    if stats.oom:
                        continue
                    if self.env.is_main and not stats.bad:
                        self._log_step(stats, bar)
                    if stats.stop:
                        self.save("step", batches_done)
                        summary["stopped_by"] = signal.Signals(int(stats.stop)).name
                        break
                    if tcfg.max_steps and self.step >= tcfg.max_steps:
                        break
                    interval = tcfg.checkpoint_interval
                    if interval and self.step % interval == 0 and not stats.bad:
                        if batches_done < len(sampler):  # at the epoch's end the epoch checkpoint follows
                            self.save("step", batches_done)
                bar.close()
                if summary["stopped_by"]:
                    break
                summary.update(self.end_epoch(batches_done))
        if self.metrics_log is not None:
            self.metrics_log.close()
        if self.env.world_size > 1:
            dist.barrier()
        summary.update(step=self.step, epoch=self.epoch, **self.counters)
        return summary
