"""A recipe's RESULTS.md: WER per set (from ``asr score --json-out``), decoding settings, training
time and hardware; or one table of the test WER of each held-out speaker (``--loso``).

    asr results --exp EXP --model MODEL_DIR --sets dev test --decode "beam 10, CTC 0.3" --out EXP/RESULTS.md
    asr results --loso --exp-prefix recipes/fsdd/exp/transformer_ --speakers george jackson \\
        --out recipes/fsdd/exp/transformer_loso.md      # reads EXP_<speaker>/avg5/decode_*/wer.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

__all__ = ["write_results"]


class MissingResults(FileNotFoundError):
    """A wer.json that the table needs is not there (the scoring stage has not run)."""


def hardware() -> str:
    """This machine: the CPU as asr.hardware sees it (ATen capability, native bf16), cores, torch, GPUs."""
    import torch

    from asr.hardware import cpu_info

    parts = [f"{cpu_info().summary()}, {os.cpu_count()} cores", f"torch {torch.__version__}"]
    if torch.cuda.is_available():
        parts.insert(0, f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
    return "; ".join(parts)


def training_setup(exp: Path) -> str:
    """Precision, device and CPU the training ran with (its log's last setup record)."""
    log = exp / "train_log.jsonl"
    setups = []
    if log.is_file():
        for line in log.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("kind") == "setup":
                setups.append(rec)
    if not setups:
        return "unknown"
    s = setups[-1]
    return f"{s['precision']} on {s['device']} ({s['cpu']})"


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


def write_results(args: argparse.Namespace) -> Path:
    """Write the table that ``args`` (the options of ``asr results``) describe to ``args.out``."""
    also_for = {}  # set -> its own (folder, label, decoding) rows
    for name, *row in args.also_for:
        also_for.setdefault(name, []).append(tuple(row))
    if args.loso:
        args.also = args.also + also_for.get("test", [])
        return loso_table(args)
    if not (args.exp and args.model and args.sets):
        raise ValueError("--exp, --model and --sets are required (or --loso)")

    variants = [("decode", "")] + [(folder, f" {label}") for folder, label, _ in args.also]
    if args.lm:
        variants.append(("decode_lm", " + LM"))
    rows, lm_lines = [], []
    unknown = set(also_for) - set(args.sets)
    if unknown:
        names, sets = ", ".join(sorted(unknown)), " ".join(args.sets)
        raise ValueError(f"--also-for names set(s) {names}, not among --sets {sets}")
    for name in args.sets:
        for folder, suffix in variants + [(folder, f" {label}") for folder, label, _ in also_for.get(name, [])]:
            label = name + suffix
            f = args.model / f"{folder}_{name}" / "wer.json"
            if not f.is_file():
                raise MissingResults(f"{f} is missing (run the scoring stage)")
            r = json.loads(f.read_text())
            lo, hi = r.get("wer_ci95", [float("nan")] * 2)
            rows.append(
                f"| {label} | **{r['wer']:.2f}** | {lo:.2f}-{hi:.2f} | {r['sub']} | {r['del']} | {r['ins']} | "
                f"{r['words']} | {r['sentences']} | {r['ser']:.2f} | {r['cer']:.2f} |"
            )
        ppl = args.lm / f"ppl_{name}.json" if args.lm else None
        if ppl is not None and ppl.is_file():
            p = json.loads(ppl.read_text())
            lm_lines.append(f"  - {name}: perplexity {p['ppl_token']:.2f} per token, {p['ppl_word']:.2f} per word")
    if args.lm:
        lm_lines = [f"- LM: `{args.lm}`; decoding with it: {args.lm_decode or 'see the recipe'}", *lm_lines]
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
            *(f"- Decoding, rows '{label}': {text}" for _, label, text in args.also),
            *(f"- Decoding, row '{name} {label}': {text}" for name, _, label, text in args.also_for),
            *lm_lines,
            f"- Training time: {training_time(args.exp)}",
            f"- Training precision: {training_setup(args.exp)}",
            f"- Hardware: {hardware()}",
            "",
        ]
    )
    args.out.write_text(text, encoding="utf-8")
    return args.out



def loso_table(args: argparse.Namespace) -> Path:
    """Test WER of every held-out speaker, their mean and the worst, with training time and setup; one more
    column (and summary line) per ``--also`` decoding of the same models."""
    also = [(folder, label) for folder, label, _ in args.also]
    wers: dict[str, list[float]] = {folder: [] for folder in ["decode", *(f for f, _ in also)]}  # test WER per decoding
    rows, missing = [], []
    for spk in args.speakers:
        exp = Path(f"{args.exp_prefix}{spk}")
        res = {}
        for folder, name in [(folder, "test") for folder in wers] + [("decode", "dev")]:
            f = exp / args.model_name / f"{folder}_{name}" / "wer.json"
            if f.is_file():
                res[folder, name] = json.loads(f.read_text())
            elif name == "test":
                missing.append(str(f))
        if any((folder, "test") not in res for folder in wers):
            continue
        t = res["decode", "test"]
        lo, hi = t.get("wer_ci95", [float("nan")] * 2)
        for folder in wers:
            wers[folder].append(res[folder, "test"]["wer"])
        extra = "".join(f" {res[folder, 'test']['wer']:.2f} |" for folder, _ in also)
        dev = f"{res['decode', 'dev']['wer']:.2f}" if ("decode", "dev") in res else "-"
        rows.append(f"| {spk} | **{t['wer']:.2f}** | {lo:.2f}-{hi:.2f} | {t['sub']} / {t['del']} / {t['ins']} |{extra} "
                    f"{dev} | {training_time(exp)} |")  # fmt: skip
    if missing:
        raise MissingResults("missing " + ", ".join(missing))

    def summary(w: list[float]) -> str:
        return f"mean **{sum(w) / len(w):.2f}**, worst **{max(w):.2f}** over {len(w)} speakers"

    setups: dict[str, list[str]] = {}  # each distinct training setup and the speakers trained with it
    for spk in args.speakers:
        setups.setdefault(training_setup(Path(f"{args.exp_prefix}{spk}")), []).append(spk)
    setup = "; ".join(f"{k} ({', '.join(v)})" for k, v in setups.items()) if len(setups) > 1 else next(iter(setups))
    text = "\n".join(
        [
            f"# {args.title}",
            "",
            "| held-out speaker | test WER % | 95% CI | sub / del / ins |"
            + "".join(f" test WER %, {label} |" for _, label in also) + " dev WER % | training |",
            "|---|---|---|---|" + "---|" * len(also) + "---|---|",
            *rows,
            "",
            f"Test WER: {summary(wers['decode'])}" + (f" ({args.decode})" if args.decode else "") + ".",
            *(f"Test WER, {label}: {summary(wers[folder])} ({text})." for folder, label, text in args.also),
            "",
            f"- Training precision: {setup}",
            f"- Hardware: {hardware()}",
            "",
        ]
    )
    args.out.write_text(text, encoding="utf-8")
    return args.out


