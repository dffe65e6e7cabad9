"""Training throughput: seconds of audio per second, steps/s, achieved FLOP/s and peak memory.

    python tools/bench_train.py                                  # 100 h config, 8 x 10 s, fp32 and bf16, CPU
    python tools/bench_train.py --device cuda --precision bf16 --config configs/librispeech/transformer_960h.yaml \
        --peak-tflops 989                                        # H100 dense bf16: prints model FLOP utilisation

One full training step as ``asr train`` takes it (autocast forward, loss, backward, gradient
clipping, AdamW) on a fixed batch of random fbank features with random token sequences: the data
pipeline is not measured (tools/bench_data.py does that). Each precision runs in its own process
so its peak resident memory (CPU) or peak allocated memory (CUDA) is its own. FLOPs per step are
counted once with ``torch.utils.flop_counter`` (forward + backward, matmuls and attention; the
oneDNN products of ``asr.model.fast`` and in-place products included). Prints a table and one JSON line.

``--split`` (CPU) says how far a step is from its arithmetic: one more step with every ATen op
timed, the products (matrix products and convolutions) apart from the rest, and forward + backward
apart from the update (gradient clipping and AdamW); then this CPU's rate on one large product
(2048 x 2048 x 2048 in the step's precision, best of five), and the floor that rate puts under the
step's arithmetic. ``--min-seconds`` spreads the batch's durations from ``--seconds`` down to it,
tokens in proportion (``tools/bench.py``'s training batch and model: ``--vocab 500 --tokens 50
--min-seconds 8.5 --set model.frontend=conv2d``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, json_line

PRODUCT_OPS = {"mm", "addmm", "addmm_", "bmm", "baddbmm", "convolution", "convolution_backward", "_linear_pointwise"}


def each_op(fn, visit) -> float:
    """Run ``fn`` calling ``visit(func, args, seconds)`` after each of its ATen ops; ``fn``'s wall seconds."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Hook(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            t0 = time.perf_counter()
            out = func(*args, **(kwargs or {}))
            visit(func, args, time.perf_counter() - t0)
            return out

    t0 = time.perf_counter()
    with Hook():
        fn()
    return time.perf_counter() - t0


def uncounted_product_flops(fn) -> int:
    """FLOPs in ``fn`` of the products ``torch.utils.flop_counter`` does not count: ``asr.model.fast``'s
    oneDNN products (x @ w^T, w (N, K)), in-place ``addmm_`` (a weight gradient summed over chunks) and
    the CPU's fused attention (``scaled_dot_product_attention`` without dropout: Q K^T and P V forward,
    four products of those shapes backward; its recomputation of Q K^T is not counted)."""
    import math

    import torch

    onednn, addmm_ = torch.ops.mkldnn._linear_pointwise.default, torch.ops.aten.addmm_.default
    attn = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    attn_bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    total = 0

    def count(func, args, seconds) -> None:
        nonlocal total
        if func is onednn:
            total += 2 * math.prod(args[0].shape[:-1]) * args[1].shape[0] * args[1].shape[1]
        elif func is addmm_:
            (m, k), n = args[1].shape, args[2].shape[1]
            total += 2 * m * k * n
        elif func in (attn, attn_bwd):
            q, k = args[:2] if func is attn else args[1:3]  # (B, H, L, d), (B, H, S, d)
            products = 2 if func is attn else 4
            total += products * 2 * math.prod(q.shape) * k.shape[-2]

    each_op(fn, count)
    return total


def product_rate(precision: str, n: int = 2048) -> float:
    """FLOP/s of one n x n x n product in the precision's dtype on this CPU, the best of five."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)  # warm-up: the kernel chosen, the memory touched
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def timed_ops(fn) -> dict:
    """Run ``fn`` with every ATen op timed: seconds in products (PRODUCT_OPS) and in the rest."""
    spent = {"products_s": 0.0, "rest_s": 0.0}

    def add(func, args, seconds) -> None:
        spent["products_s" if func.overloadpacket.__name__ in PRODUCT_OPS else "rest_s"] += seconds

    wall = each_op(fn, add)
    return {**spent, "wall_s": wall}


def worker(args: argparse.Namespace) -> dict:
    import torch

    from asr import speed
    from asr.config import load_config
    from asr.hardware import autocast, resolve_precision
    from asr.model import ASRModel

    speed.configure_process()  # as the command line does at start-up (heap_reuse)
    device = torch.device(args.device)
    precision = resolve_precision(args.precision, device)
    cfg = load_config(args.config, [f"model.vocab_size={args.vocab}", *args.set])
    torch.manual_seed(0)
    model = ASRModel(cfg.model).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    frames = int(args.seconds * 100)
    min_frames = int((args.min_seconds or args.seconds) * 100)
    feats = torch.randn(args.batch, frames, cfg.model.input_dim, device=device) * 3 + 10  # (B, T, 80)
    feat_lens = torch.linspace(frames, min_frames, args.batch, device=device).round().long()  # (B,)
    token_lens = (feat_lens * args.tokens / frames).round().long()  # (B,)
    tokens = torch.randint(1, args.vocab - 1, (args.batch, args.tokens), device=device)  # (B, U)

    def forward_backward() -> None:
        with autocast(precision, device):
            loss = model(feats, feat_lens, tokens, token_lens)["loss"]
        scaler.scale(loss).backward()

    def update() -> None:
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def step() -> None:
        forward_backward()
        update()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        flops = uncounted_product_flops(step)
    flops += fc.get_total_flops()
    for _ in range(args.warmup):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    t = times[len(times) // 2]  # median step
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    out = {
        "precision": precision,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "params_m": model.num_parameters() / 1e6,
        "step_s": t,
        "steps_per_s": 1 / t,
        "audio_s_per_s": args.batch * args.seconds / t,
        "tflop_per_step": flops / 1e12,
        "achieved_tflops": flops / t / 1e12,
        "peak_mem_mb": peak_mb,
    }
    if args.peak_tflops:
        out["mfu"] = out["achieved_tflops"] / args.peak_tflops
    if args.split and device.type == "cpu":
        fb, up = timed_ops(forward_backward), timed_ops(update)
        rate = product_rate(precision)
        out["split"] = {
            "forward_backward": fb,
            "update": up,
            "product_tflops": rate / 1e12,
            "floor_s": flops / rate,
            "product_rate_in_step_tflops": flops / fb["products_s"] / 1e12,
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "configs/librispeech/transformer_100h.yaml"))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0, help="duration of every utterance (the longest)")
    p.add_argument("--min-seconds", type=float, default=0.0, help="the shortest; durations spread evenly between")
    p.add_argument("--tokens", type=int, default=40, help="tokens per utterance (about 10 s of speech, 5000 BPE)")
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=0.0, help="device peak for the precision, for MFU")
    p.add_argument("--split", action="store_true", help="CPU: time products and the rest; the arithmetic's floor")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.precision = args.precision[0]
        print(json.dumps(worker(args)))
        return
    from asr.hardware import cpu_info

    info = cpu_info()
    rows, skipped = [], []
    for prec in args.precision:
        if prec == "bf16" and args.device == "cpu" and not info.native_bf16:
            skipped.append(prec)
            print("bf16 skipped: this CPU has no native bf16 arithmetic (emulated bf16 is many times slower than fp32)")
            continue
        cmd = [sys.executable, __file__, "--worker", "--precision", prec]
        for k in (
            "config",
            "device",
            "batch",
            "seconds",
            "min_seconds",
            "tokens",
            "vocab",
            "steps",
            "warmup",
            "peak_tflops",
        ):
            cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
        cmd += ["--split"] if args.split else []
        cmd += [f"--set={kv}" for kv in args.set]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"bench_train: {prec} failed:\n{res.stderr[-3000:]}")
        rows.append(json_line(res.stdout))
    if not rows:
        sys.exit("bench_train: nothing to run")
    cfg_name = Path(args.config).stem
    if args.device == "cpu":
        print(f"CPU: {info.summary()}")
    durations = f"{args.min_seconds:g}-{args.seconds:g}" if args.min_seconds else f"{args.seconds:g}"
    print(f"training step, {cfg_name}, batch {args.batch} x {durations} s, {args.tokens} tokens/utt, "
          f"vocab {args.vocab}, {rows[0]['params_m']:.1f} M parameters, {rows[0]['threads']} threads")  # fmt: skip
    head = (
        f"{'precision':<10}{'step s':>9}{'steps/s':>9}{'audio s/s':>11}{'TFLOP/step':>12}{'TFLOP/s':>9}{'peak MB':>10}"
    )
    if args.peak_tflops:
        head += f"{'MFU':>8}"
    print(head)
    for r in rows:
        line = (
            f"{r['precision']:<10}{r['step_s']:>9.3f}{r['steps_per_s']:>9.2f}{r['audio_s_per_s']:>11.1f}"
            f"{r['tflop_per_step']:>12.3f}{r['achieved_tflops']:>9.3f}{r['peak_mem_mb']:>10.0f}"
        )
        if args.peak_tflops:
            line += f"{100 * r['mfu']:>7.1f}%"
        print(line)
    if any("split" in r for r in rows):
        print_split(rows)
    print(json.dumps({"bench": "train", "config": cfg_name, "batch": args.batch, "seconds": args.seconds,
                      "min_seconds": args.min_seconds or args.seconds,
                      "cpu": info.to_dict(), "skipped": skipped, "results": rows}))  # fmt: skip


def print_split(rows: list[dict]) -> None:
    """The --split table: a step's ATen ops timed (under the timer, so a little slower than unprofiled)."""
    print("\none step, every ATen op timed: products (matrix products, convolutions) and the rest, seconds")
    print(f"{'precision':<10}{'fwd+bwd':>9}{'products':>10}{'rest':>7}{'update':>8}{'GFLOP/s in step':>17}"
          f"{'large product':>15}{'floor':>7}")  # fmt: skip
    for r in rows:
        sp = r["split"]
        fb = sp["forward_backward"]
        print(
            f"{r['precision']:<10}{fb['wall_s']:>9.3f}{fb['products_s']:>10.3f}{fb['rest_s']:>7.3f}"
            f"{sp['update']['wall_s']:>8.3f}{1000 * sp['product_rate_in_step_tflops']:>17.0f}"
            f"{1000 * sp['product_tflops']:>15.0f}{sp['floor_s']:>7.3f}"
        )
    print("floor: the step's counted arithmetic at the large product's rate")


if __name__ == "__main__":
    main()
