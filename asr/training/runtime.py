"""The run's plumbing: where this process sits (DDP), all-reduce, stop signals, RNG state, metrics log.

Nothing here knows about speech: ``asr.training.train`` builds the loop from these pieces.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from asr.atomic import atomic_write_text

__all__ = ["DistEnv", "setup_distributed", "all_reduce", "StopFlag", "MetricsLog", "rng_state", "set_rng_state",
           "LOG_FILE"]  # fmt: skip

log = logging.getLogger(__name__)

LOG_FILE = "train_log.jsonl"


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
