"""The ``asr`` command: parse arguments, call the library, print. Nothing else lives here.

Each subcommand has an ``add_<name>`` function that declares its arguments and a ``run_<name>``
function that does the work; ``COMMANDS`` lists them in the order ``asr --help`` shows.
"""

from __future__ import annotations

import argparse
import logging
import sys

from . import __version__


def add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print the model size and structure for a config")
    p.add_argument("--config", help="experiment YAML (defaults: the 100 h model)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--vocab-size", type=int, default=5000, help="vocabulary size when the config leaves it 0")


def run_info(args: argparse.Namespace) -> int:
    from .config import load_config
    from .model import ASRModel

    cfg = load_config(args.config, args.overrides)
    if cfg.model.vocab_size == 0:
        cfg.model.vocab_size = args.vocab_size
    model = ASRModel(cfg.model)
    m = cfg.model
    print(
        f"frontend={m.frontend} stack={m.stack} d_model={m.d_model} heads={m.heads} ffn={m.ffn_dim} "
        f"encoder_layers={m.encoder_layers} decoder_layers={m.decoder_layers} norm={m.norm} vocab={m.vocab_size}"
    )
    print(f"parameters: {model.num_parameters():,}")
    return 0


COMMANDS = [
    ("info", add_info, run_info),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asr", description="Speech recognition: prepare, train, decode, score.")
    parser.add_argument("--version", action="version", version=f"asr {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for _, add, _ in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    run = {name: fn for name, _, fn in COMMANDS}[args.command]
    try:
        return int(run(args) or 0)
    except (ValueError, FileNotFoundError) as e:  # config, audio and data errors carry their own context
        print(f"asr {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
