"""Two versions of ``asr`` side by side: the working tree against an earlier commit, on this CPU.

    python tools/bench_trees.py --base HEAD~1                    # batched decoding, 16 x 10 s
    python tools/bench_trees.py --base HEAD~1 --batch 1           # one utterance at a time
    python tools/bench_trees.py --base HEAD~1 --work train        # a training step (--precision bf16)
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python tools/bench_trees.py ...

For changes that are not a speed path of ``asr.speed`` (so ``tools/bench_paths.py`` cannot turn
them off), this checks out ``--base`` in a temporary git worktree and times the same work with
each tree's ``asr``, in child processes that alternate (base, this tree, base, ...), so that the
machine's drift hits both alike. The work is ``tools/bench.py``'s decoding: the 100 h model
(conv2d frontend, vocabulary 500, random weights of seed 0), 16 random utterances of 10 s, beam 10
with CTC weight 0.3, every output forced to 30 tokens, in batches of ``--batch``; each child
decodes once untimed, then ``--reps`` times, and reports the median and a hash of the hypotheses
(the two trees must find the same ones: a change of arrangement must not change results). Prints
a table and one JSON line with the CPU (``asr.hardware``) and the ratio base / this tree (> 1:
this tree is faster).

``--work train`` times ``tools/bench.py``'s training step instead: the same model and seed, its
batch of 8 x 1000 frames, forward and backward (fp32, or bf16 autocast with ``--precision bf16``),
each child ``--reps`` timed steps after three untimed ones. The trees must compute the same loss to
the bit and the same gradient norm to float32 rounding (1e-5 relative: a change of arrangement may
sum in another order).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, json_line, model_100h


def check_tree(tree: str) -> None:
    """Stop unless the ``asr`` this worker imports is ``tree``'s (its parent put ``tree`` first on PYTHONPATH)."""
    import asr

    if not Path(asr.__file__).resolve().is_relative_to(Path(tree).resolve()):
        sys.exit(f"bench_trees: the worker for {tree} imports asr from {asr.__file__}")


def tree_env(tree: str) -> dict[str, str]:
    """This environment with ``tree`` first on PYTHONPATH: a worker's ``import asr`` finds that tree's
    (PYTHONPATH comes before the installed package, whose editable finder Python asks last)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tree, os.environ.get("PYTHONPATH")]))}


def train_worker(tree: str, reps: int, threads: int, precision: str) -> dict:
    """Training steps with the ``asr`` of ``tree``: median seconds of ``reps`` after three untimed,
    the first step's loss and gradient norm."""
    check_tree(tree)
    import torch
    from bench import _build_train

    from asr import speed

    torch.set_num_threads(threads)
    speed.configure_process()  # as the command line does at start-up (heap_reuse)
    model, loss_fn, batch = _build_train("ours-conv2d")  # with the asr first on PYTHONPATH: tree's
    model.train()
    times, first = [], None
    for i in range(reps + 3):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model, batch)
        loss.backward()
        if i >= 3:
            times.append(time.perf_counter() - t0)
        if first is None:
            grads = [p.grad.norm() for p in model.parameters() if p.grad is not None]
            norm = torch.linalg.vector_norm(torch.stack(grads))
            first = (float(loss), float(norm))
    return {"seconds": statistics.median(times), "times": times, "loss": first[0], "grad_norm": first[1]}


def worker(tree: str, batch: int, reps: int, threads: int) -> dict:
    """Decode with the ``asr`` of ``tree``; median seconds of ``reps`` decodes after one untimed."""
    check_tree(tree)
    import torch
    from bench import decode_inputs

    from asr import speed
    from asr.decode import beam_search

    torch.set_num_threads(threads)
    speed.configure_process()  # as the command line does at start-up (heap_reuse)
    feats, lens = decode_inputs(16)  # 16 x 1000 frames of seed 1
    torch.manual_seed(0)
    model = model_100h("conv2d", 500, Path(tree)).eval()  # tree's config, built by tree's asr

    def run() -> list[list[int]]:
        out = []
        with torch.inference_mode():
            for i in range(0, 16, batch):
                memory, mem_lens = model.encode(feats[i : i + batch], lens[i : i + batch])
                hyps = beam_search(model, memory, mem_lens, beam_size=10, ctc_weight=0.3, max_len=30, min_len=30)
                out += [h[0].tokens for h in hyps]
        return out

    run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        hyps = run()
        times.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(times), "times": times, "hyps": hashlib.md5(str(hyps).encode()).hexdigest()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="HEAD~1", help="the commit to compare this working tree with")
    ap.add_argument("--batch", type=int, default=16, help="utterances per search (16: all at once; 1: one at a time)")
    ap.add_argument("--runs", type=int, default=3, help="child processes per tree, alternating")
    ap.add_argument("--reps", type=int, default=4, help="timed decodes per child")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", choices=["decode", "train"], default="decode")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="of --work train")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        if args.work == "train":
            print(json.dumps(train_worker(args.worker, args.reps, args.threads, args.precision)))
        else:
            print(json.dumps(worker(args.worker, args.batch, args.reps, args.threads)))
        return
    from asr.hardware import cpu_info

    base_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.base], check=True,
                              capture_output=True, text=True).stdout.strip()
    results: dict[str, list[dict]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = str(Path(tmp) / "base")
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", base_tree, base_rev], check=True)
        try:
            for run in range(args.runs):
                for name, tree in (("base", base_tree), ("this", str(REPO))):
                    cmd = [sys.executable, __file__, "--worker", tree, "--batch", str(args.batch),
                           "--reps", str(args.reps), "--threads", str(args.threads), "--work", args.work,
                           "--precision", args.precision]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=tree_env(tree)).stdout
                    r = json_line(out)
                    results[name].append(r)
                    what = f"loss {r['loss']:.6f}" if args.work == "train" else f"hypotheses {r['hyps'][:8]}"
                    print(f"run {run + 1}/{args.runs} {name}: {r['seconds']:.3f} s ({what})", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", base_tree], check=False)
    rs = [r for rs in results.values() for r in rs]
    if args.work == "train":
        norms = [r["grad_norm"] for r in rs]
        same = len({r["loss"] for r in rs}) == 1 and max(norms) - min(norms) <= 1e-5 * max(norms)
        work = (f"the 100 h training step (8 x 1000 frames, {args.precision}, forward and backward), {args.threads} "
                f"threads; {args.runs} child processes per tree, alternating, each the median of {args.reps} steps")
        same_what = "same loss and gradient norm"
    else:
        same = len({r["hyps"] for r in rs}) == 1
        work = (f"decoding 16 x 10 s in batches of {args.batch}, beam 10 + CTC 0.3, 30 tokens, {args.threads} "
                f"threads; {args.runs} child processes per tree, alternating, each the median of {args.reps} decodes")
        same_what = "same hypotheses"
    med = {k: statistics.median(r["seconds"] for r in rs) for k, rs in results.items()}
    info = cpu_info()
    print(f"CPU: {info.summary()}")
    print(work)
    print("| tree | seconds per child (medians) | median |")
    print("|---|---|---|")
    for name, label in (("base", f"base {base_rev}"), ("this", "this tree")):
        per_child = ", ".join(f"{r['seconds']:.3f}" for r in results[name])
        print(f"| {label} | {per_child} | {med[name]:.3f} |")
    print(f"base / this tree: {med['base'] / med['this']:.3f}x; {same_what}: {same}")
    print(json.dumps({"bench": "trees", "cpu": info.to_dict(), "base": base_rev, "work": args.work,
                      "batch": args.batch if args.work == "decode" else None,
                      "precision": args.precision if args.work == "train" else None,
                      "base_s": round(med["base"], 4), "this_s": round(med["this"], 4),
                      "ratio": round(med["base"] / med["this"], 4), "same_results": same}))
    if not same:
        sys.exit(f"the two trees did not give the {same_what}")


if __name__ == "__main__":
    main()
