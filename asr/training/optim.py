"""The optimiser and its learning-rate schedule, built from ``train`` settings.

Adam or AdamW with weight decay on matrices only (not on biases, LayerNorm gains or CMVN
buffers), and one of three schedules as a ``LambdaLR`` factor of ``train.lr``: ESPnet's noam
(WarmupLR), warmup + cosine, or warmup + constant. Both objects have a ``state_dict``, so a
resumed run continues the schedule exactly.
"""

from __future__ import annotations

import math

import torch

from asr.config import TrainConfig

__all__ = ["build_optimizer", "lr_factor", "freeze"]


def freeze(model: torch.nn.Module, prefixes: list[str]) -> list[str]:
    """Keep fixed every parameter whose name starts with one of ``prefixes`` (``train.freeze``, e.g.
    ``encoder.`` or ``frontend.``); returns their names. A prefix that names nothing is an error."""
    params = dict(model.named_parameters())
    for prefix in prefixes:
        if not any(n.startswith(prefix) for n in params):
            raise ValueError(f"train.freeze: {prefix!r} names no parameter of the model (they start with "
                             f"{', '.join(sorted({n.split('.')[0] + '.' for n in params}))})")
    names = [n for n in params if n.startswith(tuple(prefixes))]
    for n in names:
        params[n].requires_grad_(False)
    return names


def build_optimizer(
    model: torch.nn.Module, tcfg: TrainConfig, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """The optimiser over ``model``'s parameters and its schedule over ``total_steps`` updates."""
    scales = [(n, float(f)) for n, _, f in (str(s).partition("=") for s in tcfg.lr_scales)]

    def scale_of(name: str) -> float:
        return next((f for prefix, f in scales if name.startswith(prefix)), 1.0)

    groups = []
    for factor in sorted({1.0, *(f for _, f in scales)}):
        trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad and scale_of(n) == factor]
        decay = [p for n, p in trained if p.dim() >= 2]  # train.freeze keeps the ones not trained fixed
        no_decay = [p for n, p in trained if p.dim() < 2]
        groups += [{"params": decay, "weight_decay": tcfg.weight_decay, "lr": tcfg.lr * factor},
                   {"params": no_decay, "weight_decay": 0.0, "lr": tcfg.lr * factor}]
    opt_cls = torch.optim.AdamW if tcfg.optimizer == "adamw" else torch.optim.Adam
    optimizer = opt_cls(groups, lr=tcfg.lr, betas=tuple(tcfg.betas), eps=tcfg.eps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, tcfg, total_steps))


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


# ----------------------------------------------------------------------------- the run
