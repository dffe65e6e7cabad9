"""The ``asr`` command: parse arguments, call the library, print. Nothing else lives here.

Each subcommand has an ``add_<name>`` function that declares its arguments and a ``run_<name>``
function that does the work, in the module of its group (data, training, decoding, models);
``COMMANDS`` lists them in the order ``asr --help`` shows.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from asr import __version__, speed
from asr.cli.data import (
    add_cmvn,
    add_download,
    add_prepare,
    add_pseudo_label,
    add_tokenizer,
    run_cmvn,
    run_download,
    run_prepare,
    run_pseudo_label,
    run_tokenizer,
)
from asr.cli.decoding import (
    add_decode,
    add_results,
    add_score,
    add_transcribe,
    run_decode,
    run_results,
    run_score,
    run_transcribe,
)
from asr.cli.lm import add_lm, run_lm
from asr.cli.models import add_import, run_import
from asr.cli.training import add_average, add_info, add_plot, add_train, run_average, run_info, run_plot, run_train

COMMANDS = [
    ("info", add_info, run_info),
    ("download", add_download, run_download),
    ("prepare", add_prepare, run_prepare),
    ("tokenizer", add_tokenizer, run_tokenizer),
    ("cmvn", add_cmvn, run_cmvn),
    ("train", add_train, run_train),
    ("average", add_average, run_average),
    ("plot", add_plot, run_plot),
    ("decode", add_decode, run_decode),
    ("transcribe", add_transcribe, run_transcribe),
    ("score", add_score, run_score),
    ("results", add_results, run_results),
    ("pseudo-label", add_pseudo_label, run_pseudo_label),
    ("import", add_import, run_import),
    ("lm", add_lm, run_lm),
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
    speed.configure_process()
    try:
        return int(run(args) or 0)
    except (ValueError, FileNotFoundError) as e:  # config, audio and data errors carry their own context
        print(f"asr {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `asr score ... | head -1`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
