"""Training throughput of one run with every thread against several runs at once (``loso.sh --jobs``).

    python tools/bench_jobs.py --data recipes/fsdd/data_tts_nicolas     # a prepared FSDD split
    python tools/bench_jobs.py --data DIR --jobs 2 --epochs 3 --config configs/fsdd/transformer.yaml

Runs ``asr train`` on DIR's train.jsonl for --epochs epochs, first alone with every thread of the
CPU, then --jobs copies at once with an equal share of the threads each (OMP_NUM_THREADS), and
compares the seconds of training audio per second (``audio_s_per_s`` of train_log.jsonl) after
the first epoch (which computes and caches the features). Prints a table and one JSON line with
the ratio of all jobs together to the single run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, machine, print_table


def start(data: Path, config: str, out: Path, epochs: int, threads: int) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    sets = [f"data.{k}={data / v}" for k, v in
            (("train", "train.jsonl"), ("dev", "dev.jsonl"), ("tokenizer", "tokenizer"), ("cmvn", "cmvn.json"))]
    sets += [f"train.epochs={epochs}", "train.checkpoint_interval=0"]
    cmd = [sys.executable, "-m", "asr", "train", "--config", config, "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(out.with_suffix(".log"), "w"))


def rate(out: Path) -> float:
    """Median audio seconds per second over the training records after the first epoch."""
    recs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    rates = [r["audio_s_per_s"] for r in recs if r.get("kind") == "train" and r["epoch"] >= 2]
    if not rates:
        raise SystemExit(f"{out}: no training records after epoch 1 (raise --epochs)")
    return statistics.median(rates)


def layout(data: Path, config: str, tmp: Path, name: str, jobs: int, threads: int, epochs: int) -> list[float]:
    outs = [tmp / f"{name}{i}" for i in range(jobs)]
    procs = [start(data, config, o, epochs, threads) for o in outs]
    for o, p in zip(outs, procs, strict=True):
        if p.wait() != 0:
            log = o.with_suffix(".log")
            raise SystemExit(f"asr train failed ({log}):\n{log.read_text()[-2000:]}")
    return [rate(o) for o in outs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a prepared FSDD folder (train.jsonl, dev.jsonl, tokenizer, cmvn)")
    ap.add_argument("--config", default=str(REPO / "configs/fsdd/transformer.yaml"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is not counted")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    data = Path(args.data).resolve()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        alone = layout(data, args.config, tmp, "alone", 1, cores, args.epochs)
        together = layout(data, args.config, tmp, "jobs", args.jobs, max(1, cores // args.jobs), args.epochs)
    ratio = sum(together) / alone[0]
    print_table(f"FSDD training, {machine()}", ["layout", "runs", "threads each", "audio s/s each", "all runs"], [
        ["one run", 1, cores, f"{alone[0]:.0f}", f"{alone[0]:.0f}"],
        [f"--jobs {args.jobs}", args.jobs, max(1, cores // args.jobs), " / ".join(f"{r:.0f}" for r in together),
         f"{sum(together):.0f} ({ratio:.2f}x)"],
    ])  # fmt: skip
    print(json.dumps({"bench": "jobs", "cpu": machine(), "config": args.config, "data": str(data),
                      "alone_audio_s_per_s": round(alone[0], 1), "jobs": args.jobs,
                      "jobs_audio_s_per_s": [round(r, 1) for r in together], "ratio": round(ratio, 3)}))


if __name__ == "__main__":
    main()
