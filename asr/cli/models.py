"""Models from elsewhere: ``asr import``."""

from __future__ import annotations

import argparse


def add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="another toolkit's published model as a model directory (ESPnet)")
    p.add_argument("toolkit", choices=["espnet"])
    p.add_argument("dir", nargs="?", help="the downloaded model folder (exp/*/config.yaml, *.pth, ...)")
    p.add_argument("--out", required=True, help="model directory to write (must not exist or be empty)")
    for k in ("config", "weights", "stats", "bpe"):
        p.add_argument(f"--{k}", help=f"the {k} file, where the folder's layout is not ESPnet's")


def run_import(args: argparse.Namespace) -> int:
    from ..importers import import_espnet

    out = import_espnet(args.out, args.dir, config=args.config, weights=args.weights, stats=args.stats, bpe=args.bpe)
    print(f"wrote {out}")
    return 0
