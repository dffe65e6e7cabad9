#!/usr/bin/env python
"""Data pipeline benchmark: feature speed per worker and the batch sampler's padding ratio.

    python tools/bench_data.py [--data ../shared/data] [--repeats 5] [--num-workers 2]

1. Seconds of audio per second of one worker (one process, one thread, as a DataLoader worker
   runs): ``ASRDataset.__getitem__`` (load + speed perturbation + fbank + tokenize) over the
   LibriSpeech utterances in ``--data``, without and with speed perturbation, with a breakdown
   of where the time goes. Optionally the same through a DataLoader with ``--num-workers``.
2. The padding ratio of ``DynamicBucketSampler`` on those utterances' durations for a few
   batch sizes and bucket counts (mean over 5 epochs); ``num_buckets=1`` is plain random batching.

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import SHARED_DATA, find_data_root

from asr.config import DataConfig
from asr.corpora.librispeech import SUBSETS, find_subset, prepare_librispeech
from asr.data.dataset import ASRDataset, collate
from asr.data.manifest import read_manifest
from asr.features.audio import fbank_batch, load_audio, speed_perturb
from asr.hardware import cpu_info
from asr.text import Tokenizer, normalize


def load_records(data: Path, tmp: Path) -> list[dict]:
    root = data / "LibriSpeech"
    subsets = [s for s in SUBSETS if find_subset(root, s) is not None]
    prepare_librispeech(root, subsets, tmp, progress=False)
    return [r for s in subsets for r in read_manifest(tmp / f"{s}.jsonl")]


def time_dataset(ds: ASRDataset, repeats: int) -> list[float]:
    """Seconds of output audio per wall second, for each of ``repeats`` passes (epochs) over ``ds``."""
    rates = []
    for epoch in range(repeats):
        ds.set_epoch(epoch)
        audio = 0.0
        t0 = time.perf_counter()
        for i in range(len(ds)):
            audio += ds[i]["duration"]
        rates.append(audio / (time.perf_counter() - t0))
    return rates


def breakdown(records: list[dict], factors: list[float]) -> dict[str, float]:
    """Wall seconds spent in each stage for one pass, speed factor cycling through ``factors``."""
    t = {"load": 0.0, "speed": 0.0, "fbank": 0.0}
    for i, r in enumerate(records):
        a = time.perf_counter()
        wav = load_audio(r["audio"])
        b = time.perf_counter()
        wav = speed_perturb(wav, 16000, factors[i % len(factors)])
        c = time.perf_counter()
        fbank_batch([wav])
        d = time.perf_counter()
        t["load"] += b - a
        t["speed"] += c - b
        t["fbank"] += d - c
    return t


def time_loader(ds: ASRDataset, workers: int, repeats: int) -> tuple[float, float]:
    from torch.utils.data import DataLoader

    batches = [list(range(i, min(i + 4, len(ds)))) for i in range(0, len(ds), 4)]
    audio = 0.0
    t0 = time.perf_counter()
    for epoch in range(repeats):
        ds.set_epoch(epoch)
        for b in DataLoader(ds, batch_sampler=batches, collate_fn=collate, num_workers=workers):
            audio += sum(b.durations)
    return audio, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=find_data_root() or SHARED_DATA)
    ap.add_argument("--repeats", type=int, default=5, help="passes over the utterances per measurement")
    ap.add_argument("--num-workers", type=int, default=0, help="also time a DataLoader with this many workers")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)  # as in a DataLoader worker

    with tempfile.TemporaryDirectory() as tmp:
        records = load_records(args.data, Path(tmp))
        tok = Tokenizer.train([normalize(r["text"]) for r in records], Path(tmp) / "tok", None, "char")
        total = sum(r["duration"] for r in records)
        print(f"CPU: {cpu_info().summary()}")
        print(f"{len(records)} LibriSpeech utterances, {total:.1f} s of audio, from {args.data / 'LibriSpeech'}\n")

        # warm up: one untimed pass (file cache, allocator, resampling kernels)
        time_dataset(ASRDataset(records, tok, DataConfig(speed_perturb=[0.9, 1.0, 1.1]), train=True), 2)
        modes = [("no perturbation", []), ("speed 0.9/1.0/1.1", [0.9, 1.0, 1.1]), ("speed 0.9/1.1 only", [0.9, 1.1])]
        rows = []
        print(f"{'audio s per s, 1 worker/1 thread':<32}{'median':>10}{'best':>9}{'worst':>12}")
        for name, factors in modes:
            ds = ASRDataset(records, tok, DataConfig(speed_perturb=factors), train=True, seed=0)
            rates = time_dataset(ds, args.repeats)
            rows.append((name, statistics.median(rates)))
            print(f"{name:<32}{statistics.median(rates):>10.0f}{max(rates):>9.0f}{min(rates):>12.0f}")

        print(f"\n{'where the time goes (one pass)':<32}{'load':>10}{'speed':>9}{'fbank':>12}")
        parts = {}
        for name, factors in (("no perturbation", [1.0]), ("speed 0.9/1.0/1.1", [0.9, 1.0, 1.1])):
            t = breakdown(records, factors)
            parts[name] = t
            s = sum(t.values())
            print(f"{name:<32}{100 * t['load'] / s:>9.0f}%{100 * t['speed'] / s:>8.0f}%{100 * t['fbank'] / s:>11.0f}%")

        loader = None
        if args.num_workers > 0:
            ds = ASRDataset(records, tok, DataConfig(speed_perturb=[0.9, 1.0, 1.1]), train=True)
            audio, wall = time_loader(ds, args.num_workers, args.repeats)
            loader = {"workers": args.num_workers, "audio_s_per_s": round(audio / wall, 1)}
            print(f"\nDataLoader, {args.num_workers} workers, speed 0.9/1.0/1.1: {audio / wall:.1f} x realtime in all")

        try:
            from asr.data.sampler import DynamicBucketSampler
        except ImportError:
            DynamicBucketSampler = None  # noqa: N806
        padding: dict[str, float] | None = None
        if DynamicBucketSampler is not None:
            durations = [r["duration"] for r in records]
            padding = {}
            print(f"\n{'sampler padding ratio (5 epochs)':<32}{'buckets':>10}{'batches':>9}{'padding':>12}")
            for max_frames in (4000, 8000, 20000):
                for buckets in (1, 10, 30):
                    s = DynamicBucketSampler(durations, max_frames, 64, num_buckets=buckets, seed=0)
                    ratios = [s.padding_ratio(e) for e in range(5)]
                    n = statistics.mean(len(s.global_batches(e)) for e in range(5))
                    key = f"max_frames={max_frames},num_buckets={buckets}"
                    padding[key] = statistics.mean(ratios)
                    print(f"{'max_frames=' + str(max_frames):<32}{buckets:>10}{n:>9.1f}{100 * padding[key]:>11.1f}%")
        else:
            print("\nsampler padding ratio: asr.data.sampler is not available yet")

    result = {
        "bench": "data",
        "cpu": cpu_info().to_dict(),
        "utterances": len(records),
        "audio_s": round(total, 2),
        "audio_s_per_s_per_worker": {name: round(r, 1) for name, r in rows},  # median over passes
        "time_share": {k: {s: round(v / sum(t.values()), 3) for s, v in t.items()} for k, t in parts.items()},
        "dataloader": loader,
        "padding_ratio": None if padding is None else {k: round(v, 4) for k, v in padding.items()},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
