#!/usr/bin/env python3
"""Write a recipe's RESULTS.md: WER per set (from `asr score --json-out`), decoding settings,
training time and hardware.

    python tools/results_table.py --exp EXP --model MODEL_DIR --sets dev test --decode "beam 10, CTC 0.3" \
        --title "..." --out EXP/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def hardware() -> str:
    parts = [f"{cpu_name()}, {os.cpu_count()} cores"]
    try:
        import torch

        parts.append(f"torch {torch.__version__}")
        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            parts.insert(0, f"{n} x {torch.cuda.get_device_name(0)}")
    except ImportError:
        pass
    return "; ".join(parts)


def training_time(exp: Path) -> str:
    marker = exp / ".done.train"
    if marker.is_file():
        secs = float(marker.read_text().split()[0])
        return f"{secs / 60:.1f} min (wall clock of the training stage)"
    log = exp / "train_log.jsonl"
    if log.is_file():
        times = [json.loads(line).get("time") for line in log.read_text().splitlines() if line.strip()]
        times = [t for t in times if t]
        if len(times) >= 2:
            return f"{(times[-1] - times[0]) / 60:.1f} min (first to last log record)"
    return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exp", required=True, type=Path)
    ap.add_argument("--model", required=True, type=Path, help="model directory whose decode_<set>/wer.json are read")
    ap.add_argument("--sets", nargs="+", required=True)
    ap.add_argument("--decode", default="", help="decoding settings, as text")
    ap.add_argument("--title", default="Results")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)

    rows = []
    for name in args.sets:
        f = args.model / f"decode_{name}" / "wer.json"
        if not f.is_file():
            print(f"results_table: {f} is missing (run the scoring stage)", file=sys.stderr)
            return 2
        r = json.loads(f.read_text())
        lo, hi = r.get("wer_ci95", [float("nan")] * 2)
        rows.append(
            f"| {name} | **{r['wer']:.2f}** | {lo:.2f}-{hi:.2f} | {r['sub']} | {r['del']} | {r['ins']} | "
            f"{r['words']} | {r['sentences']} | {r['ser']:.2f} | {r['cer']:.2f} |"
        )
    text = "\n".join(
        [
            f"# {args.title}",
            "",
            f"Model: `{args.model}`",
            "",
            "| set | WER % | 95% CI | sub | del | ins | words | sentences | SER % | CER % |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"- Decoding: {args.decode or 'see the recipe'}",
            f"- Training time: {training_time(args.exp)}",
            f"- Hardware: {hardware()}",
            "",
        ]
    )
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
