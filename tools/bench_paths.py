"""Each CPU speed path of ``asr.speed`` against its plain PyTorch reference, on this CPU.

    python tools/bench_paths.py                      # every path, FSDD and 100 h training steps, fbank
    python tools/bench_paths.py --models 100h --paths cheap_dropout   # one path on one work
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python tools/bench_paths.py
                                                     # the same CPU limited to AVX2 (as a CPU without AVX-512)

For every path, one process times the same work with the path on and off, alternating within
each repetition (so background load hits both alike), and reports medians and the ratio
off / on (> 1: the path is faster here). A process-wide path (``heap_reuse``) is timed in child
processes instead, on and off alternately, each one warm-up and three timed runs, with each
child's peak resident memory. Training steps are fp32 (forward, backward, clipping,
AdamW) on fixed random batches: the FSDD model (``configs/fsdd/transformer.yaml``, 22 x 360
frames of 40 bins) and the 100 h model (``configs/librispeech/transformer_100h.yaml`` with the
conv2d frontend, 4 x 1000 frames). Decoding: the 100 h model (conv2d) on 8 random 10 s utterances,
encoder and batched beam search (beam 10, CTC 0.3, 30 tokens each), and on 4 one at a time; the
FSDD model (its conv2d frontend of 64 channels on 40 bins) on 64 random utterances of 0.6 s, in
one batch (5 tokens each).
fbank: the shared LibriSpeech utterances. The table and the JSON line name the CPU, ATen's
capability and whether it has native bf16 (``asr.hardware``), and what ``asr.speed`` would choose
here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from common import REPO, SHARED_DATA, find_data_root, json_line, librispeech_flacs, mem_mb, read_wav

from asr import speed
from asr.hardware import cpu_info

TRAIN_PATHS = ("onednn_linear", "conv_channels_last", "conv_patch_train", "real_frames", "cheap_dropout")
DECODE_PATHS = (
    "onednn_inference", "conv_channels_last", "conv_patch_gemm",
)


def training_step(config: str, sets: list[str], batch: int, frames: int, vocab: int, tokens: int):
    """A closure running one fp32 training step of ``config`` on a fixed random batch."""
    from asr.config import load_config
    from asr.model import ASRModel

    cfg = load_config(REPO / config, [f"model.vocab_size={vocab}", *sets])
    torch.manual_seed(0)
    model = ASRModel(cfg.model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(batch, frames, cfg.model.input_dim, generator=g) * 3
    feat_lens = torch.linspace(frames, int(frames * 0.85), batch).round().long()
    tok = torch.randint(2, vocab - 1, (batch, tokens), generator=g)
    tok_lens = torch.full((batch,), tokens)

    def step() -> None:
        loss = model(feats, feat_lens, tok, tok_lens)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def decoding(utts: int, frames: int, vocab: int, tokens: int, batch: int = 0,
             config: str = "configs/librispeech/transformer_100h.yaml", sets: tuple = ("model.frontend=conv2d",)):
    """A closure decoding ``utts`` random utterances with the 100 h model (conv2d frontend; or ``config``
    with ``sets``): encoder, then the batched beam search (beam 10, CTC 0.3), every output forced to
    ``tokens`` tokens; ``batch`` utterances at a time (0: all at once)."""
    from asr.config import load_config
    from asr.decode import beam_search
    from asr.model import ASRModel

    cfg = load_config(REPO / config, [f"model.vocab_size={vocab}", *sets])
    torch.manual_seed(0)
    model = ASRModel(cfg.model).eval()
    feats = torch.randn(utts, frames, cfg.model.input_dim, generator=torch.Generator().manual_seed(1))
    lens = torch.full((utts,), frames)

    step = batch or utts

    @torch.inference_mode()
    def run() -> None:
        for i in range(0, utts, step):
            memory, mem_lens = model.encode(feats[i : i + step], lens[i : i + step])
            beam_search(model, memory, mem_lens, beam_size=10, ctc_weight=0.3, max_len=tokens, min_len=tokens)

    return run


def fbank_work(data: Path):
    from asr.features.audio import fbank_batch

    files = librispeech_flacs(data)
    if not files:
        return None, 0.0
    wavs = [read_wav(f) for f in files]
    seconds = sum(w.numel() for w in wavs) / 16000

    def run() -> None:
        for w in wavs:
            fbank_batch([w], 16000, 80)  # one utterance at a time, as the dataset calls it

    return run, seconds


def time_pair(work, path: str, reps: int, warmup: int) -> tuple[float, float]:
    """Median seconds of ``work`` with ``path`` on and off, alternating."""
    on, off = [], []
    for state in (True, False):
        with speed.override(**{path: state}):
            for _ in range(warmup):
                work()
    for _ in range(reps):
        for state, out in ((True, on), (False, off)):
            with speed.override(**{path: state}):
                t = time.perf_counter()
                work()
                out.append(time.perf_counter() - t)
    return statistics.median(on), statistics.median(off)


def make_works(models: str) -> dict:
    works = {}
    if "fsdd" in models:
        works["FSDD step (fp32)"] = lambda: training_step("configs/fsdd/transformer.yaml", [], 22, 360, 29, 5)
    if "100h" in models:
        works["100 h step (fp32)"] = lambda: training_step(
            "configs/librispeech/transformer_100h.yaml", ["model.frontend=conv2d"], 4, 1000, 500, 45
        )
    if "decode" in models:
        works["100 h decoding, 8 x 10 s (fp32)"] = lambda: decoding(8, 1000, 500, 30)
        works["100 h decoding, 4 x 10 s one at a time (fp32)"] = lambda: decoding(4, 1000, 500, 30, batch=1)
        works["FSDD decoding, 64 x 0.6 s (fp32)"] = lambda: decoding(
            64, 60, 29, 5, config="configs/fsdd/transformer.yaml", sets=()
        )
    return works


def child(name: str, reps: int) -> None:
    """One process of a process-wide path: configure, build ``name``, one warm-up, ``reps`` timed runs."""
    speed.configure_process()
    work = make_works("fsdd,100h,decode")[name]()
    work()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        work()
        times.append(time.perf_counter() - t)
    print(json.dumps({"s": statistics.median(times), "peak_rss_mb": mem_mb()[1]}))


def time_process_pair(name: str, path: str, reps: int, threads: int) -> dict:
    """A process-wide path on and off: alternating child processes, ``reps`` of each (3 timed runs
    apiece); medians over the children, and the median peak resident memory."""
    import os
    import subprocess

    res: dict[bool, list[dict]] = {True: [], False: []}
    for _ in range(reps):
        for state in (True, False):
            env = {**os.environ, "ASR_SPEED_PATHS": f"{path}={int(state)}"}
            cmd = [sys.executable, __file__, "--child", name, "--reps", "3", "--threads", str(threads)]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            res[state].append(json_line(out))
    on, off = (statistics.median(r["s"] for r in res[st]) for st in (True, False))
    mem_on, mem_off = (statistics.median(r["peak_rss_mb"] or 0 for r in res[st]) for st in (True, False))
    return {"work": name, "path": path, "on_s": on, "off_s": off, "speedup": off / on,
            "peak_rss_on_mb": mem_on, "peak_rss_off_mb": mem_off}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--models", default="fsdd,100h,decode",
                    help="work to time: fsdd, 100h (training steps), decode (100 h model)")
    ap.add_argument("--paths", default="", help="only these speed paths, comma-separated (default: every one)")
    ap.add_argument("--data", type=Path, default=find_data_root() or SHARED_DATA)
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: one process of a process-wide path
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        child(args.child, args.reps)
        return 0
    only = set(filter(None, args.paths.split(",")))
    if only - set(speed.PATHS):
        ap.error(f"--paths: unknown {', '.join(sorted(only - set(speed.PATHS)))}; known: {', '.join(speed.PATHS)}")

    def wanted(path: str) -> bool:
        return not only or path in only

    info = cpu_info()
    rows = []
    for name, build in make_works(args.models).items():
        paths = [p for p in (DECODE_PATHS if "decoding" in name else TRAIN_PATHS) if wanted(p)]
        process_paths = [p for p in speed.PROCESS_PATHS if wanted(p)]
        if not paths and not process_paths:
            continue
        work = build()
        for path in paths:
            on, off = time_pair(work, path, args.reps, 1)
            rows.append({"work": name, "path": path, "on_s": on, "off_s": off, "speedup": off / on})
        del work
        for path in process_paths:
            rows.append(time_process_pair(name, path, args.reps, torch.get_num_threads()))
    if wanted("fbank_batch"):
        fb, seconds = fbank_work(args.data)
        if fb is None:
            print(f"fbank: no LibriSpeech audio under {args.data}: skipped")
        else:
            on, off = time_pair(fb, "fbank_batch", args.reps, 1)
            rows.append({"work": f"fbank, {seconds:.0f} s of audio", "path": "fbank_batch", "on_s": on,
                         "off_s": off, "speedup": off / on})  # fmt: skip
    chosen = speed.defaults(info)
    print(f"CPU: {info.summary()}; torch {torch.__version__}")
    print("| work | speed path | on (s) | off (s) | off / on | on by default here | peak RSS on / off (MB) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        mem = f"{r['peak_rss_on_mb']:.0f} / {r['peak_rss_off_mb']:.0f}" if "peak_rss_on_mb" in r else ""
        print(f"| {r['work']} | {r['path']} | {r['on_s']:.3f} | {r['off_s']:.3f} | {r['speedup']:.2f}x | "
              f"{'yes' if chosen[r['path']] else 'no'} | {mem} |")  # fmt: skip
    print(json.dumps({"bench": "paths", "cpu": info.to_dict(), "torch": torch.__version__, "defaults": chosen,
                      "rows": [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
