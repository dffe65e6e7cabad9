"""Models: ``asr info|train|average|plot``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print the model size and structure for a config")
    p.add_argument("--config", help="experiment YAML (defaults: the 100 h model)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--vocab-size", type=int, default=5000, help="vocabulary size when the config leaves it 0")


def run_info(args: argparse.Namespace) -> int:
    from asr.config import load_config
    from asr.model import ASRModel

    cfg = load_config(args.config, args.overrides)
    if cfg.model.vocab_size == 0:
        cfg.model.vocab_size = args.vocab_size
    model = ASRModel(cfg.model)
    m = cfg.model
    stack = m.stack if m.frontend == "linear" else m.conv_stack
    print(
        f"frontend={m.frontend} stack={stack} d_model={m.d_model} heads={m.heads} ffn={m.ffn_dim} "
        f"encoder_layers={m.encoder_layers} decoder_layers={m.decoder_layers} norm={m.norm} vocab={m.vocab_size}"
    )
    print(f"parameters: {model.num_parameters():,}")
    return 0


def add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model into exp/NAME (several processes: torchrun --nproc-per-node N -m asr train ...)",
    )
    p.add_argument("--config", action="append",
                   help="experiment YAML (model, data, train, decode sections); given again, a later file's keys "
                        "replace an earlier's (a model directory's config.yaml, then a fine-tuning config); "
                        "default with --init: that model directory's config.yaml")
    p.add_argument("--init", metavar="MODEL_DIR",
                   help="fine-tune: start from this model directory's weights (train.init; an imported Whisper or "
                        "ESPnet model, or one of ours); tensors the config adds start fresh and are named")
    p.add_argument("--out", required=True, help="experiment directory; it becomes a model directory")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="e.g. train.lr=0.001"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="insist on continuing from the newest checkpoint (an existing --out is always continued)",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")


def quiet_other_ranks() -> int:
    """This process's rank; ranks above 0 log warnings only (rank 0 speaks for everyone)."""
    import os

    rank = int(os.environ.get("RANK", "0"))
    if rank > 0:
        logging.getLogger().setLevel(logging.WARNING)
    return rank


def train_and_report(cfg, args: argparse.Namespace, rank: int, command: str, what: str, metrics: tuple[str, ...],
                     task=None) -> int:
    """Run the training loop and print its outcome (rank 0); the exit status: 1 when aborted on a fault,
    128 + signal when stopped by one (the checkpoint is saved), else 0."""
    import signal

    from asr.training.train import TrainingAborted, train

    try:
        summary = train(cfg, args.out, resume=args.resume, device=args.device, task=task)
    except TrainingAborted as e:
        print(f"{command}: aborted: {e}", file=sys.stderr)
        return 1
    stopped = summary["stopped_by"]
    if rank == 0 and stopped:
        print(f"stopped by {stopped} at step {summary['step']}: checkpoint saved; run the same command to continue")
    elif rank == 0:
        done = " ".join(f"{k}={summary[k]:.4g}" for k in metrics if k in summary)
        print(f"done: {summary['epoch']} epochs, {summary['step']} steps {done}; {what} {args.out}")
    return 128 + int(getattr(signal, stopped)) if stopped else 0


def run_train(args: argparse.Namespace) -> int:
    from asr.config import load_config

    rank = quiet_other_ranks()
    configs, overrides = args.config, args.overrides
    if args.init:
        configs = configs or [str(Path(args.init) / "config.yaml")]
        overrides = [f"train.init={args.init}", *overrides]  # a --set train.init given too comes later and wins
    if not configs:
        raise SystemExit("asr train: --config is required (or --init MODEL_DIR, whose config.yaml is the default)")
    cfg = load_config(configs, overrides)
    return train_and_report(cfg, args, rank, "asr train", "model directory", ("dev_loss", "dev_acc", "dev_wer"))


def add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the best or last N checkpoints of a run (or model directories) "
                       "into a model directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--exp", help="experiment directory of `asr train`")
    src.add_argument("--models", nargs="+", metavar="DIR",
                     help="model directories of one architecture (e.g. imported with `asr import`)")
    p.add_argument("--num", type=int, default=10, help="number of checkpoints to average")
    p.add_argument("--by", choices=["best", "last"], default="best", help="best by train.best_metric, or newest")
    p.add_argument("--out", required=True, help="model directory to write")


def run_average(args: argparse.Namespace) -> int:
    from asr.training.checkpoints import average_checkpoints, average_model_dirs

    if args.models:
        print(f"averaged {len(args.models)} model directories into {average_model_dirs(args.models, args.out)}")
        return 0
    out, used = average_checkpoints(args.exp, args.num, args.by, args.out)
    print(f"averaged {len(used)} checkpoints ({', '.join(p.name for p in used)}) into {out}")
    return 0


def add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="PNG of a run's loss, accuracy, WER and learning rate (needs matplotlib)")
    p.add_argument("--exp", required=True, help="experiment directory of `asr train`")
    p.add_argument("--out", help="PNG path (default: EXP/train.png)")


def run_plot(args: argparse.Namespace) -> int:
    from asr.training.plot import plot_run

    try:
        path = plot_run(args.exp, args.out)
    except ImportError as e:
        print(f"asr plot: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0
