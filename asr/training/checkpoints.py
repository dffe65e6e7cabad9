"""Training checkpoints and averaging.

``exp/NAME/checkpoints/{epoch_E,step_S}.pt``: each one plain dict with the model, optimizer,
scheduler, scaler, sampler position, RNG states (as tensors), step, epoch and config. Averaging
the last or best of them (or several model directories of one architecture) writes a model
directory (:mod:`asr.checkpoint`) or, for a language model's run, an LM directory.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from asr.checkpoint import CMVN_FILE, CONFIG_FILE, MODEL_FILE, safe_load, save_model_dir, tokenizer_file
from asr.config import Config, ConfigError, TrainConfig, load_config
from asr.text import TOKENIZER_FILE

CHECKPOINT_DIR = "checkpoints"

log = logging.getLogger(__name__)



SHAPE_KEYS = ("input_dim", "d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers", "frontend", "stack",
              "conv_channels", "conv_stack", "norm", "vocab_size")  # fmt: skip


def check_same_model(saved_model: dict[str, Any], cfg: Config, exp: Path) -> None:
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


def update_best(best: list[dict], name: str, value: float, epoch: int, step: int, tcfg: TrainConfig) -> list[dict]:
    """Keep the ``keep_best`` best epoch checkpoints by ``best_metric`` (loss/WER lower, acc higher)."""
    higher = tcfg.best_metric == "dev_acc"
    entries = [b for b in best if b["name"] != name] + [{"name": name, "value": value, "epoch": epoch, "step": step}]
    entries.sort(key=lambda b: -b["value"] if higher else b["value"])
    return entries[: tcfg.keep_best]


def checkpoint_path(exp_dir: str | os.PathLike, kind: str, number: int) -> Path:
    """``exp/checkpoints/epoch_3.pt`` (``kind="epoch"``) or ``exp/checkpoints/step_1000.pt``."""
    if kind not in ("epoch", "step"):
        raise ValueError(f"checkpoint kind: expected 'epoch' or 'step', got {kind!r}")
    return Path(exp_dir) / CHECKPOINT_DIR / f"{kind}_{number}.pt"


def list_checkpoints(exp_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Training checkpoints of an experiment, oldest first: dicts with path, kind, step, epoch.

    Reads only each file's small fields (memory-mapped, tensors untouched). A file that cannot be
    read is logged and left out, so a damaged newest checkpoint falls back to the previous one.
    """
    d = Path(exp_dir) / CHECKPOINT_DIR
    out = []
    for p in sorted(d.glob("*_*.pt")) if d.is_dir() else []:
        kind = p.stem.split("_", 1)[0]
        if kind not in ("epoch", "step"):
            continue
        try:
            ck = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
            out.append({"path": p, "kind": kind, "step": int(ck["step"]), "epoch": int(ck["epoch"])})
        except Exception as e:
            log.warning("%s: unreadable checkpoint left out (%s)", p, e)
    # At the same step an epoch-end checkpoint (validated, position at the next epoch) is newer.
    return sorted(out, key=lambda c: (c["step"], c["kind"] == "epoch"))


def load_latest_checkpoint(
    exp_dir: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> tuple[Path, dict[str, Any]] | None:
    """The newest loadable training checkpoint as ``(path, dict)``, or None when there is none."""
    for c in reversed(list_checkpoints(exp_dir)):
        try:
            return c["path"], safe_load(c["path"], map_location)
        except ValueError as e:
            log.warning("%s; trying the previous checkpoint", e)
    return None


def prune_checkpoints(exp_dir: str | os.PathLike, keep_last: int, protect: set[str] | frozenset = frozenset()) -> None:
    """Keep the newest ``keep_last`` epoch checkpoints plus those named in ``protect`` (the best);
    step checkpoints older than the newest epoch checkpoint are useless for resuming and go, and
    of the newer ones the last ``keep_last`` stay."""
    cks = list_checkpoints(exp_dir)
    epochs = [c for c in cks if c["kind"] == "epoch"]
    steps = [c for c in cks if c["kind"] == "step"]
    last_epoch_step = epochs[-1]["step"] if epochs else -1
    live_steps = [c for c in steps if c["step"] > last_epoch_step]
    doomed = epochs[:-keep_last] + [c for c in steps if c["step"] <= last_epoch_step] + live_steps[:-keep_last]
    for c in doomed:
        if c["path"].name not in protect:
            c["path"].unlink(missing_ok=True)


def average_state_dicts(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors (accumulated in float64); other tensors (integer
    buffers) are taken from the last state. All states must have the same keys and shapes."""
    if not states:
        raise ValueError("average_state_dicts: no states to average")
    keys = list(states[-1])
    out: dict[str, torch.Tensor] = {}
    for k in keys:
        for i, s in enumerate(states):
            if k not in s or s[k].shape != states[-1][k].shape:
                raise ValueError(f"average_state_dicts: state {i} lacks {k!r} or has another shape")
        last = states[-1][k]
        if last.is_floating_point():
            acc = torch.zeros(last.shape, dtype=torch.float64)
            for s in states:
                acc += s[k].to(torch.float64)
            out[k] = (acc / len(states)).to(last.dtype)
        else:
            out[k] = last.clone()
    return out


def average_checkpoints(
    exp_dir: str | os.PathLike, num: int, by: str, out: str | os.PathLike
) -> tuple[Path, list[Path]]:
    """Average ``num`` epoch checkpoints of ``exp_dir`` into the model directory ``out``.

    ``by="last"``: the newest ``num`` epoch-end checkpoints; ``by="best"``: the ``num`` best by the
    run's ``train.best_metric`` (the ranking is kept in every checkpoint). Returns ``(out, used)``.
    """
    exp = Path(exp_dir)
    if by not in ("best", "last"):
        raise ValueError(f"--by: expected 'best' or 'last', got {by!r}")
    if num < 1:
        raise ValueError(f"--num: expected a positive number of checkpoints, got {num}")
    cks = list_checkpoints(exp)
    if not cks:
        raise FileNotFoundError(f"{exp / CHECKPOINT_DIR}: no training checkpoints")
    epochs = [c["path"] for c in cks if c["kind"] == "epoch"]
    if by == "last":
        chosen = epochs[-num:]
        if len(chosen) < num:
            raise ValueError(
                f"{exp}: {len(epochs)} epoch checkpoint(s) on disk, --num {num} asked; "
                "lower --num or raise train.keep_last for the next run"
            )
    else:
        newest = safe_load(cks[-1]["path"])
        best = newest.get("best") or []
        if len(best) < num:
            raise ValueError(
                f"{exp}: {len(best)} ranked epoch checkpoint(s) (by {newest.get('best_metric', '?')}), "
                f"--num {num} asked; lower --num or raise train.keep_best for the next run"
            )
        chosen = [exp / CHECKPOINT_DIR / b["name"] for b in best[:num]]
    states = []
    for p in chosen:
        ck = safe_load(p)
        states.append(ck["model"])
        log.info("averaging %s (epoch %s, step %s)", p.name, ck["epoch"], ck["step"])
    tok = tokenizer_file(exp) or exp / TOKENIZER_FILE
    from asr.lm.directory import is_lm_dir

    if is_lm_dir(exp):  # an `asr lm train` run: an LM directory (its weights without the loss wrapper's prefix)
        from asr.lm import load_lm_config, save_lm_dir

        avg = {k.removeprefix("lm."): v for k, v in average_state_dicts(states).items()}
        return save_lm_dir(out, load_lm_config(exp / CONFIG_FILE), avg, tok if tok.is_file() else None), chosen
    cfg = load_config(exp / CONFIG_FILE)
    cmvn = exp / CMVN_FILE
    d = save_model_dir(
        out, cfg, average_state_dicts(states), tok if tok.is_file() else None, cmvn if cmvn.is_file() else None
    )
    return d, chosen


def average_model_dirs(model_dirs: list[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Average the weights of model directories of one architecture (their ``model`` config
    sections equal, e.g. several imported or fine-tuned copies) into ``out``; the tokenizer, CMVN
    statistics and the rest of the config are the first directory's."""
    if len(model_dirs) < 2:
        raise ValueError(f"--models: expected at least two model directories, got {len(model_dirs)}")
    first = Path(model_dirs[0])
    cfg = load_config(first / CONFIG_FILE)
    states = []
    for d in map(Path, model_dirs):
        other = load_config(d / CONFIG_FILE).model
        if other != cfg.model:
            diff = next(k for k in vars(cfg.model) if getattr(cfg.model, k) != getattr(other, k))
            raise ValueError(
                f"{d}: model.{diff} is {getattr(other, diff)!r}, but {first} has {getattr(cfg.model, diff)!r}: "
                "only models of one architecture can be averaged"
            )
        state = safe_load(d / MODEL_FILE)
        states.append(state["model"] if isinstance(state.get("model"), dict) else state)
        log.info("averaging %s", d)
    tok, cmvn = tokenizer_file(first) or first / TOKENIZER_FILE, first / CMVN_FILE
    return save_model_dir(
        out, cfg, average_state_dicts(states), tok if tok.is_file() else None, cmvn if cmvn.is_file() else None
    )
