"""``asr plot``: one PNG of a run's JSON Lines log (loss, accuracy, WER, learning rate against steps).

matplotlib is an optional extra (``pip install 'asr[plot]'``); without it a clear error says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["read_log", "plot_run"]


def read_log(path: str | os.PathLike) -> tuple[list[dict], list[dict]]:
    """(train records, dev records) of a ``train_log.jsonl``; a bad line is an error naming it."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no training log (is this an experiment directory of `asr train`?)")
    train, dev = [], []
    for lineno, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{lineno}: not JSON ({e})") from None
        kind = rec.get("kind")
        if kind in ("dev", "train"):  # (setup records say what the run computed with)
            (dev if kind == "dev" else train).append(rec)
    return train, dev


def plot_run(exp: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Write a 2x2 figure (loss, accuracy, WER, learning rate vs step) of ``exp``; return its path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("asr plot needs matplotlib: pip install 'asr[plot]' (or pip install matplotlib)") from None
    from asr.training.train import LOG_FILE

    exp = Path(exp)
    train, dev = read_log(exp / LOG_FILE)
    if not train and not dev:
        raise ValueError(f"{exp / LOG_FILE}: empty log, nothing to plot yet")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)

    def line(ax, recs, key, label, **kw):
        pts = [(r["step"], r[key]) for r in recs if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=label, **kw)

    line(axes[0, 0], train, "loss", "train")
    line(axes[0, 0], dev, "dev_loss", "dev", marker="o")
    axes[0, 0].set_ylabel("loss (per utterance)")
    line(axes[0, 1], train, "acc", "train")
    line(axes[0, 1], dev, "dev_acc", "dev", marker="o")
    axes[0, 1].set_ylabel("token accuracy")
    line(axes[1, 0], dev, "dev_wer", "dev greedy", marker="o")
    axes[1, 0].set_ylabel("WER (%)")
    line(axes[1, 1], train, "lr", "lr")
    axes[1, 1].set_ylabel("learning rate")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    for ax in axes[1]:
        ax.set_xlabel("step")
    fig.suptitle(str(exp))
    fig.tight_layout()
    path = Path(out) if out else exp / "train.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
