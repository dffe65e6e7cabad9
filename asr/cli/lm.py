"""Language models: ``asr lm train|eval``."""

from __future__ import annotations

import argparse


def add_lm(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lm", help="train or evaluate a language model for shallow fusion")
    lm_sub = p.add_subparsers(dest="lm_command", metavar="LM_COMMAND", required=True)
    t = lm_sub.add_parser("train", help="train an LM into an LM directory (several processes: torchrun ... -m asr lm "
                                        "train ...)")  # fmt: skip
    t.add_argument("--config", required=True, help="LM experiment YAML (lm, data, train sections)")
    t.add_argument("--text", nargs="+", metavar="FILE", help="training text: text files (.gz too) or manifests; "
                                                              "default: the config's data.train")  # fmt: skip
    t.add_argument("--dev", nargs="+", metavar="FILE", help="dev text (default: the config's data.dev)")
    t.add_argument("--tokenizer", help="the ASR model's tokenizer (directory or .model; default: data.tokenizer)")
    t.add_argument("--out", required=True, help="experiment directory; it becomes an LM directory")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    t.add_argument("--resume", action="store_true", help="insist on continuing from the newest checkpoint")
    t.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")
    e = lm_sub.add_parser("eval", help="perplexity per token and per word of an LM on text")
    e.add_argument("--model", required=True, help="LM directory")
    e.add_argument("--text", nargs="+", required=True, metavar="FILE", help="text files or manifests")
    e.add_argument("--device", default="cpu")
    e.add_argument("--quantize", action="store_true", help="the LM with int8 products (as --quantize-lm fuses it)")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--json-out", metavar="FILE", help="also write the JSON object to FILE (recipes collect these)")


def run_lm(args: argparse.Namespace) -> int:
    return _train(args) if args.lm_command == "train" else _eval(args)


def _train(args: argparse.Namespace) -> int:
    from asr.cli.training import quiet_other_ranks, train_and_report
    from asr.lm.config import load_lm_config
    from asr.lm.task import LMTask

    rank = quiet_other_ranks()
    cfg = load_lm_config(args.config, args.overrides)
    if args.text:
        cfg.data.train = list(args.text)
    if args.dev:
        cfg.data.dev = list(args.dev)
    if args.tokenizer:
        cfg.data.tokenizer = args.tokenizer
    return train_and_report(cfg, args, rank, "asr lm train", "LM directory", ("dev_loss", "dev_ppl"), LMTask(cfg))


def _eval(args: argparse.Namespace) -> int:
    import dataclasses
    import json
    from pathlib import Path

    from asr.lm.directory import load_lm
    from asr.lm.evaluate import perplexity

    ppl = perplexity(load_lm(args.model, args.device), args.text, quantized=args.quantize)
    record = json.dumps({**dataclasses.asdict(ppl), "ppl_token": ppl.per_token, "ppl_word": ppl.per_word,
                         "quantized": args.quantize})  # fmt: skip
    if args.json_out:
        Path(args.json_out).write_text(record + "\n", encoding="utf-8")
    if args.json:
        print(record)
    else:
        print(ppl.summary())
    return 0
