"""Models from elsewhere: ``asr import``."""

from __future__ import annotations

import argparse


def add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="another toolkit's published model as a model directory (ESPnet, Whisper)")
    p.add_argument("toolkit", choices=["espnet", "whisper"])
    p.add_argument("dir", nargs="?", help="espnet: the downloaded model folder (exp/*/config.yaml, *.pth); "
                   "whisper: an OpenAI checkpoint (.pt), a Hugging Face folder or a CTranslate2 folder")
    p.add_argument("--tokenizer", help="whisper: the tokenizer.json to use (an OpenAI checkpoint carries none)")
    p.add_argument("--out", required=True, help="model directory to write (must not exist or be empty)")
    for k in ("config", "weights", "stats", "bpe"):
        p.add_argument(f"--{k}", help=f"the {k} file, where the folder's layout is not ESPnet's")
    p.add_argument("--lm", action="store_true", help="import the folder's language model (exp/lm_train_*: "
                   "TransformerLM or SequentialRNNLM) as an LM directory instead of the ASR model")  # fmt: skip


def run_import(args: argparse.Namespace) -> int:
    from asr.importers import import_espnet

    if args.toolkit == "whisper":
        from asr.importers.whisper import import_whisper

        if not args.dir:
            raise ValueError("asr import whisper: give the model (a .pt file or a folder)")
        for k in ("config", "weights", "stats", "bpe", "lm"):
            if getattr(args, k):
                raise ValueError(f"--{k}: not for a Whisper model")
        print(f"wrote {import_whisper(args.dir, args.out, args.tokenizer)}")
        return 0
    if args.tokenizer:
        raise ValueError("--tokenizer: only for asr import whisper (ESPnet's is --bpe)")
    if args.lm:
        from asr.importers.espnet_lm import import_espnet_lm

        if args.stats:
            raise ValueError("--stats: an LM has no feature statistics")
        out = import_espnet_lm(args.out, args.dir, config=args.config, weights=args.weights, bpe=args.bpe)
        print(f"wrote {out}")
        return 0
    out = import_espnet(args.out, args.dir, config=args.config, weights=args.weights, stats=args.stats, bpe=args.bpe)
    print(f"wrote {out}")
    return 0
