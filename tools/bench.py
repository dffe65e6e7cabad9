"""Speed of asr next to ESPnet and SpeechBrain on this machine: training, decoding, features.

One invocation runs every system in its own process (so peak memory is each one's own),
alternating systems within each repetition so that background load hits all of them alike,
and prints a table per section plus one JSON line of ratios (ours / peer speed; > 1 is faster).

    bash tools/peers/setup.sh                               # once: ESPnet + SpeechBrain venv
    flock /tmp/asr-cpu.lock .venv/bin/python tools/bench.py  # everything, 3 repetitions
    .venv/bin/python tools/bench.py --sections features --reps 5

Equal work everywhere: the 100 h model size (d_model 256, 4 heads, 12/6 layers, FFN 2048,
vocabulary 500, CTC 0.3, label smoothing 0.1, random weights), the same batch shapes and
lengths, the same number of generated tokens, the same thread count. Peers are skipped (and
said so) when tools/peers/.venv is missing. This file imports ``asr`` only in our own workers.
Systems ending in ``-mkl`` are ours with ``ASR_ONEDNN_LINEAR=0``: every fp32 matrix product in
PyTorch's default BLAS (MKL), as in the peers, to show what routing them through oneDNN gives.

The decoding table also gives, per timed decode, the page faults (fresh 4 KB pages the kernel
handed the process) and the CPU seconds spent in the kernel. A fresh process's first decode
faults in all the memory it needs; what that costs depends on the machine (on a VM whose host
takes freed memory back, each first touch of a page is a fault on the host too, several times
dearer), so a decode after ``--decode-warmup`` runs measures the steady rate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, find_data_root, json_line, librispeech_flacs, machine, mem_mb, model_100h, print_table

PEERS_PY = REPO / "tools" / "peers" / ".venv" / "bin" / "python"
OURS_PY = Path(sys.executable)
VOCAB = 500

TRAIN_SYSTEMS = ["ours-conv2d", "ours-conv2d-mkl", "ours-linear", "espnet", "speechbrain"]


# ----------------------------------------------------------------------------- shared inputs
def train_batch(batch: int = 8, frames: int = 1000, min_frames: int = 850, vocab: int = VOCAB, seed: int = 0):
    """Random features (B, T, 80), lengths spread over [min_frames, frames], tokens (B, U) about one per
    20 frames (a 10 s LibriSpeech utterance has ~45 BPE-500 tokens), 0-padded."""
    import torch

    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(batch, frames, 80, generator=g)  # (B, T, 80)
    feat_lens = torch.linspace(frames, min_frames, batch).round().long()  # (B,)
    token_lens = (feat_lens + 10) // 20  # (B,)
    tokens = torch.randint(2, vocab - 1, (batch, int(token_lens.max())), generator=g)  # (B, U)
    tokens[torch.arange(tokens.shape[1]) >= token_lens.unsqueeze(1)] = 0
    return feats, feat_lens, tokens, token_lens


def _set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
    torch.set_num_interop_threads(1)


# ----------------------------------------------------------------------------- workers
def _build_train(system: str):
    """(model, loss_fn(model, batch) -> scalar, batch) for one system."""
    import torch

    feats, feat_lens, tokens, token_lens = train_batch()
    torch.manual_seed(0)  # the same weights in every process (torch's own start seed varies)
    if system.startswith("ours"):
        model = model_100h(system.split("-")[1], VOCAB)
        batch = (feats, feat_lens, tokens, token_lens)

        def loss_fn(m, b):
            return m(*b)["loss"]

        return model, loss_fn, batch
    from peers.models import BUILDERS, Batch

    build, loss_fn = BUILDERS[system]
    return build(VOCAB), loss_fn, Batch(feats, feat_lens, tokens, token_lens)


def worker_train(system: str, precision: str, threads: int, steps: int, warmup: int = 1) -> dict:
    """Forward + backward of one batch, ``steps`` times after ``warmup`` steps; times and memory."""
    import torch

    _set_threads(threads)
    model, loss_fn, batch = _build_train(system)
    model.train()
    rss_built, _ = mem_mb()
    params = sum(p.numel() for p in model.parameters())
    times, losses = [], []
    for i in range(steps + warmup):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model, batch)
        loss.backward()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
        losses.append(float(loss))
    _, peak = mem_mb()
    return {"step_s": statistics.median(times), "times": times, "peak_rss_mb": peak, "rss_built_mb": rss_built,
            "params": params, "loss": losses[0]}


def worker_bf16_error(system: str, threads: int) -> dict:
    """What bf16 autocast costs in accuracy: loss and gradients against fp32 on the same batch and
    weights (eval mode, so dropout does not differ)."""
    import torch

    _set_threads(threads)
    model, loss_fn, batch = _build_train(system)
    model.eval()
    out = {}
    grads = {}
    for prec in ("fp32", "bf16"):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = loss_fn(model, batch)
        loss.backward()
        out[prec] = float(loss)
        grads[prec] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).double()
    g32, g16 = grads["fp32"], grads["bf16"]
    return {
        "loss_fp32": out["fp32"],
        "loss_bf16": out["bf16"],
        "loss_rel_diff": abs(out["bf16"] - out["fp32"]) / abs(out["fp32"]),
        "grad_cosine": float(torch.nn.functional.cosine_similarity(g32, g16, dim=0)),
        "grad_rel_err": float((g16 - g32).norm() / g32.norm()),
    }


def worker_features(threads: int, reps: int) -> dict:
    """fbank_batch, fbank (torchaudio, float64) and kaldi-native-fbank on the same real audio,
    alternating; seconds per pass over all files (medians) and agreement with Kaldi."""
    import numpy as np
    import torch

    _set_threads(threads)
    import kaldi_native_fbank as knf

    from asr.features.audio import fbank, fbank_batch, load_audio

    root = find_data_root()
    if root is None:
        return {"error": "no real speech found (set ASR_TEST_DATA)"}
    wavs = [load_audio(p) for p in librispeech_flacs(root)]
    seconds = sum(w.numel() for w in wavs) / 16000

    def run_knf():
        out = []
        for w in wavs:
            opts = knf.FbankOptions()
            opts.frame_opts.dither = 0.0
            opts.frame_opts.snip_edges = True
            opts.mel_opts.num_bins = 80
            opts.energy_floor = 0.0
            f = knf.OnlineFbank(opts)
            f.accept_waveform(16000, (w * 32768.0).numpy())
            f.input_finished()
            out.append(np.stack([f.get_frame(i) for i in range(f.num_frames_ready)]))
        return out

    fns = {"fbank_batch": lambda: fbank_batch(wavs), "fbank": lambda: [fbank(w) for w in wavs], "knf": run_knf}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    ref = torch.cat([torch.from_numpy(x) for x in run_knf()])
    ours = torch.cat(fbank_batch(wavs))
    d = (ours - ref).abs()
    d2 = (ours - torch.cat([fbank(w) for w in wavs])).abs()
    # bands more than 20 nats below their frame's peak are below float32's resolution (knf's own
    # rounding there reaches 3e-2; tests/test_audio.py shows torchaudio's float32 lands as far off)
    resolved = d[ours >= ours.amax(1, keepdim=True) - 20.0]
    return {
        "audio_s": seconds,
        "files": len(wavs),
        **{f"{k}_s": statistics.median(v) for k, v in times.items()},
        "vs_knf_max": float(d.max()), "vs_knf_mean": float(d.mean()),
        "vs_knf_max_resolved": float(resolved.max()), "resolved_share": resolved.numel() / d.numel(),
        "vs_fbank_max": float(d2.max()), "vs_fbank_mean": float(d2.mean()),
    }


DECODE_SYSTEMS = ["ours-conv2d", "ours-conv2d-mkl", "ours-conv2d-b1", "ours-conv2d-bf16", "ours-linear", "espnet"]


def decode_inputs(utts: int = 16, frames: int = 1000, seed: int = 1):
    """Random features (N, T, 80) of ``utts`` 10 s utterances: the search does the same work whatever the
    input, since every system is forced to exactly ``tokens`` tokens."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(utts, frames, 80, generator=g), torch.full((utts,), frames, dtype=torch.long)


def worker_decode(system: str, mode: str, threads: int, tokens: int = 30, beam: int = 10, ctc_weight: float = 0.3,
                  utts: int = 16, precision: str = "fp32", warmup: int = 0) -> dict:
    """Decode ``utts`` utterances (encoder included), every output forced to ``tokens`` tokens;
    ``warmup`` untimed decodes of the same utterances first (0: the first decode of a fresh process).

    ours: all utterances in one batched search (``-b1``: one utterance at a time; ``-bf16``: CPU bf16
    autocast), eos suppressed
    for ``tokens`` steps by ``min_len``; ESPnet: Speech2Text's own path, one utterance at a time
    through BatchBeamSearch (full decoder + CTC prefix scorer, pre-beam 1.5 x beam), with the
    eos output bias set to -1e4 and maxlenratio=-tokens (a fixed ``tokens`` steps). Greedy is
    beam 1 without CTC in ESPnet (what Speech2Text runs for beam_size=1, ctc_weight=0).
    """
    import torch

    _set_threads(threads)
    feats, lens = decode_inputs(utts)
    torch.manual_seed(0)
    bsz = 1 if "-b1" in system else utts
    precision = "bf16" if "-bf16" in system else precision
    if system.startswith("ours"):
        from asr.decode import beam_search, greedy_search

        model = model_100h(system.split("-")[1], VOCAB).eval()

        def run() -> list[list[int]]:
            out = []
            for i in range(0, utts, bsz):
                with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
                    memory, mem_lens = model.encode(feats[i : i + bsz], lens[i : i + bsz])
                    if mode == "greedy":
                        out += greedy_search(model, memory, mem_lens, max_len=tokens, min_len=tokens)
                    else:
                        hyps = beam_search(model, memory, mem_lens, beam_size=beam, ctc_weight=ctc_weight,
                                           max_len=tokens, min_len=tokens)
                        out += [h[0].tokens for h in hyps]
            return out
    else:
        from espnet.nets.batch_beam_search import BatchBeamSearch
        from espnet.nets.scorers.ctc import CTCPrefixScorer
        from espnet.nets.scorers.length_bonus import LengthBonus
        from peers.models import build_espnet

        model = build_espnet(VOCAB).eval()
        with torch.no_grad():
            model.decoder.output_layer.bias[model.eos] = -1e4
        w = 0.0 if mode == "greedy" else ctc_weight
        scorers = {"decoder": model.decoder, "ctc": CTCPrefixScorer(ctc=model.ctc, eos=model.eos),
                   "length_bonus": LengthBonus(VOCAB)}
        weights = {"decoder": 1.0 - w, "ctc": w, "length_bonus": 0.0}
        search = BatchBeamSearch(scorers=scorers, weights=weights, beam_size=1 if mode == "greedy" else beam,
                                 vocab_size=VOCAB, sos=model.sos, eos=model.eos, token_list=model.token_list,
                                 pre_beam_score_key="full")
        search.eval()

        def run() -> list[list[int]]:
            out = []
            for i in range(utts):
                with torch.no_grad():
                    enc, _ = model.encode(feats[i : i + 1], lens[i : i + 1])
                    hyps = search(x=enc[0], maxlenratio=-tokens, minlenratio=0.0)
                out.append(hyps[0].yseq[1:-1].tolist())
            return out

    for _ in range(warmup):
        run()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    hyps = run()
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    lengths = sorted({len(h) for h in hyps})
    return {"seconds": dt, "utt_per_s": utts / dt, "token_lengths": lengths, "peak_rss_mb": mem_mb()[1],
            "page_faults": r1.ru_minflt - r0.ru_minflt, "system_s": r1.ru_stime - r0.ru_stime}  # fmt: skip


def worker_bf16_decode(threads: int, model_dir: str, manifest: str, batch: int = 32) -> dict:
    """What bf16 autocast costs a trained model in decoding: WER of fp32 and bf16 (the model's own
    decode settings) on a manifest, and the share of utterances whose hypotheses are identical."""
    import torch

    _set_threads(threads)
    from asr.data.manifest import read_manifest
    from asr.features.audio import load_audio
    from asr.inference import load_model
    from asr.scoring import edit_distance
    from asr.text import normalize

    rec = load_model(model_dir)
    cfg = rec.config
    recs = read_manifest(manifest)
    hyps: dict[str, list[list[int]]] = {"fp32": [], "bf16": []}
    seconds = {"fp32": 0.0, "bf16": 0.0}
    for i in range(0, len(recs), batch):
        chunk = recs[i : i + batch]
        feats = rec.features([load_audio(r["audio"], cfg.data.sample_rate) for r in chunk])
        lens = torch.tensor([f.shape[0] for f in feats])
        padded = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)  # (B, T, F)
        for prec in ("fp32", "bf16"):
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
                hyps[prec] += [h.tokens for h in rec.recognize(padded, lens)]
            seconds[prec] += time.perf_counter() - t0
    out = {"utts": len(recs), "same": sum(a == b for a, b in zip(hyps["fp32"], hyps["bf16"], strict=True)) / len(recs)}
    for prec in ("fp32", "bf16"):
        errs = words = 0
        for r, h in zip(recs, hyps[prec], strict=True):
            ref = normalize(r["text"], cfg.data.normalizer).split()
            errs += edit_distance(ref, normalize(rec.text(h), cfg.data.normalizer).split())
            words += len(ref)
        out[f"wer_{prec}"] = 100.0 * errs / max(words, 1)
        out[f"seconds_{prec}"] = seconds[prec]
    return out


WORKERS = {"train": worker_train, "bf16_error": worker_bf16_error, "features": worker_features,
           "decode": worker_decode, "bf16_decode": worker_bf16_decode}


# ----------------------------------------------------------------------------- orchestration
def run_worker(kind: str, system: str, threads: int, timeout: float = 1800, **kw) -> dict:
    """Run one worker in a fresh process with ``threads`` threads; its JSON result."""
    py = PEERS_PY if system in ("espnet", "speechbrain") else OURS_PY
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONWARNINGS="ignore")
    if system.endswith("-mkl"):  # ours with every fp32 matrix product in PyTorch's default BLAS, as the peers
        env["ASR_ONEDNN_LINEAR"] = "0"
    args = [str(py), str(Path(__file__).resolve()), "--worker", kind, "--system", system, "--threads", str(threads),
            "--kwargs", json.dumps(kw)]
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    try:
        return json_line(p.stdout)
    except ValueError:
        return {"error": f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:] or p.stdout[-300:]}"}


def _median(results: list[dict], key: str) -> float | None:
    vals = [r[key] for r in results if key in r]
    return statistics.median(vals) if vals else None


def section_train(systems: list[str], threads_list: list[int], reps: int, steps: int, log, warmup: int = 1,
                  bf16: bool = True) -> tuple[list, dict]:  # fmt: skip
    runs: dict[tuple, list[dict]] = {}
    precisions = ("fp32", "bf16") if bf16 else ("fp32",)
    configs = [(s, p) for s in systems for p in (("fp32",) if s == "speechbrain" else precisions)]
    for rep in range(reps):
        for threads in threads_list:
            order = configs[rep % len(configs):] + configs[: rep % len(configs)]  # rotate the order each rep
            for system, prec in order:
                r = run_worker("train", system, threads, precision=prec, steps=steps, warmup=warmup)
                runs.setdefault((system, prec, threads), []).append(r)
                log(f"  train rep {rep + 1}/{reps} {threads}T {system} {prec}: "
                    + (f"{r['step_s']:.2f} s/step, peak {r['peak_rss_mb']:.0f} MB" if "step_s" in r else r["error"]))
    rows, ratios = [], {}
    for threads in threads_list:
        base = runs.get(("espnet", "fp32", threads))
        base_t = _median(base, "step_s") if base else None
        base_m = _median(base, "peak_rss_mb") if base else None
        for system, prec in configs:
            rs = runs[(system, prec, threads)]
            t, m = _median(rs, "step_s"), _median(rs, "peak_rss_mb")
            if t is None:
                rows.append([f"{threads}", system, prec, "failed: " + rs[0].get("error", "?"), "", "", "", "", ""])
                continue
            same = runs.get(("espnet", prec, threads))
            same_t = _median(same, "step_s") if same else None
            speed = base_t / t if base_t else None
            speed_same = same_t / t if same_t else None
            mem = m / base_m if base_m else None
            params = f"{rs[0]['params'] / 1e6:.2f}"
            rows.append([f"{threads}", system, prec, params, f"{t:.2f}", f"{8 / t:.2f}", f"{m / 1024:.2f}",
                         f"{speed:.2f}x" if speed else "-", f"{speed_same:.2f}x" if speed_same else "-",
                         f"{mem:.2f}" if mem else "-"])
            if not system.startswith("espnet") and speed:
                ratios[f"train_{threads}t_{system}_{prec}_vs_espnet_fp32"] = round(speed, 3)
                ratios[f"train_{threads}t_{system}_{prec}_peak_mem_vs_espnet_fp32"] = round(mem, 3)
            if not system.startswith("espnet") and speed_same and prec != "fp32":
                ratios[f"train_{threads}t_{system}_{prec}_vs_espnet_{prec}"] = round(speed_same, 3)
    return rows, ratios


def section_decode(systems: list[str], threads_list: list[int], reps: int, log, warmup: int = 0) -> tuple[list, dict]:
    runs: dict[tuple, list[dict]] = {}
    configs = [(s, m) for m in ("beam", "greedy") for s in systems]
    for rep in range(reps):
        for threads in threads_list:
            order = configs[rep % len(configs):] + configs[: rep % len(configs)]
            for system, mode in order:
                r = run_worker("decode", system, threads, mode=mode, warmup=warmup)
                runs.setdefault((system, mode, threads), []).append(r)
                log(f"  decode rep {rep + 1}/{reps} {threads}T {system} {mode}: "
                    + (f"{r['utt_per_s']:.2f} utt/s, tokens {r['token_lengths']}, {r['page_faults']} page faults, "
                       f"{r['system_s']:.2f} s in the kernel" if "seconds" in r else r["error"]))
    rows, ratios = [], {}
    for threads in threads_list:
        for mode in ("beam", "greedy"):
            base = runs.get(("espnet", mode, threads))
            base_s = _median(base, "utt_per_s") if base else None
            for system in systems:
                rs = runs[(system, mode, threads)]
                u = _median(rs, "utt_per_s")
                if u is None:
                    rows.append([str(threads), mode, system, "failed: " + rs[0].get("error", "?"), "", "", "", ""])
                    continue
                x = u / base_s if base_s else None
                faults, kernel_s = _median(rs, "page_faults"), _median(rs, "system_s")
                rows.append([str(threads), mode, system, f"{u:.2f}", f"{1 / u:.3f}", f"{x:.2f}x" if x else "-",
                             f"{faults:.0f}", f"{kernel_s:.2f}"])  # fmt: skip
                if system != "espnet" and x:
                    ratios[f"decode_{mode}_{threads}t_{system}_vs_espnet"] = round(x, 3)
                ratios[f"decode_{mode}_{threads}t_{system}_page_faults"] = round(faults)
                ratios[f"decode_{mode}_{threads}t_{system}_system_s"] = round(kernel_s, 3)
    return rows, ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="train,bf16,decode,features",
                    help="comma list of: train, bf16, decode, features")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (one process per system per repetition)")
    ap.add_argument("--threads", default="2,1", help="comma list of thread counts")
    ap.add_argument("--steps", type=int, default=2, help="timed training steps per process (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed training steps first, every system alike (5: the steady state of a long run)")
    ap.add_argument("--decode-warmup", type=int, default=0,
                    help="untimed decodes of the same utterances first, every system alike (0: a fresh process's "
                         "first decode is timed)")
    ap.add_argument("--systems", default=",".join(TRAIN_SYSTEMS), help="training systems to run")
    ap.add_argument("--decode-systems", default=",".join(DECODE_SYSTEMS), help="decoding systems to run")
    ap.add_argument("--bf16-model", default="", help="bf16 section: a trained model directory to decode with")
    ap.add_argument("--bf16-manifest", default="", help="bf16 section: the manifest it decodes (fp32 and bf16)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--system", default="", help=argparse.SUPPRESS)
    ap.add_argument("--kwargs", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads_list = [int(x) for x in args.threads.split(",")]
    if args.worker:
        kw = json.loads(args.kwargs)
        if args.worker not in ("features", "bf16_decode"):
            kw["system"] = args.system
        if args.system.startswith("ours") or args.worker in ("features", "bf16_decode"):
            from asr import speed

            speed.configure_process()  # as the command line does at start-up (heap_reuse)
        print(json.dumps(WORKERS[args.worker](threads=threads_list[0], **kw)))
        return

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    sections = args.sections.split(",")
    systems = args.systems.split(",")
    if not PEERS_PY.exists():
        log(f"note: {PEERS_PY} missing (run tools/peers/setup.sh): peers skipped")
        systems = [s for s in systems if s.startswith("ours")]
    from asr.hardware import cpu_info

    print(f"machine: {machine()}")
    ratios: dict[str, float] = {}
    native_bf16 = cpu_info().native_bf16
    if not native_bf16:
        print("bf16 rows skipped: this CPU has no native bf16 arithmetic (emulated bf16: many times slower than fp32)")
        sections = [s for s in sections if s != "bf16"]
    if "train" in sections:
        rows, r = section_train(systems, threads_list, args.reps, args.steps, log, args.warmup, bf16=native_bf16)
        ratios.update(r)
        print_table(
            f"Training step, forward + backward, batch 8 x 1000 frames (lengths 850-1000), medians of {args.reps} runs",
            ["threads", "system", "precision", "params M", "s/step", "utt/s", "peak RSS GB", "speed vs ESPnet fp32",
             "vs ESPnet same precision", "peak RSS vs ESPnet fp32"],
            rows,
        )
    if "decode" in sections:
        dsys = [s for s in DECODE_SYSTEMS if s in args.decode_systems.split(",") and (native_bf16 or "bf16" not in s)]
        if not PEERS_PY.exists():
            dsys = [s for s in dsys if s.startswith("ours")]
        rows, r = section_decode(dsys, threads_list, args.reps, log, args.decode_warmup)
        ratios.update(r)
        ratios["decode_warmup"] = args.decode_warmup
        warm = f"after {args.decode_warmup} untimed decode(s)" if args.decode_warmup else "a fresh process's first"
        print_table(
            f"Decoding 16 utterances of 10 s ({warm}), encoder included, every output forced to 30 tokens, "
            f"medians of {args.reps} runs (beam: 10 with CTC weight 0.3; -b1: one utterance at a time; -bf16: bf16 "
            "autocast; -mkl: fp32 products in MKL)",
            ["threads", "search", "system", "utt/s", "s/utt", "speed vs ESPnet", "page faults", "kernel s"],
            rows,
        )
    if "bf16" in sections:
        rows = []
        for system in [s for s in systems if s.startswith("ours")]:
            r = run_worker("bf16_error", system, threads_list[0])
            if "error" in r:
                rows.append([system, r["error"], "", "", ""])
                continue
            rows.append([system, f"{r['loss_fp32']:.4f}", f"{r['loss_bf16']:.4f}", f"{r['loss_rel_diff']:.2e}",
                         f"{r['grad_cosine']:.5f} / {r['grad_rel_err']:.3f}"])
            ratios[f"bf16_{system}_loss_rel_diff"] = round(r["loss_rel_diff"], 6)
            ratios[f"bf16_{system}_grad_cosine"] = round(r["grad_cosine"], 6)
        print_table("What CPU bf16 autocast costs in training (same batch and weights, no dropout)",
                    ["system", "loss fp32", "loss bf16", "rel. diff", "grad cosine / rel. err"], rows)
        if args.bf16_model:
            r = run_worker("bf16_decode", "ours", threads_list[0], model_dir=args.bf16_model,
                           manifest=args.bf16_manifest)
            if "error" in r:
                log(f"bf16 decode check failed: {r['error']}")
            else:
                print_table(f"What bf16 costs a trained model in decoding ({args.bf16_model}, {r['utts']} utterances)",
                            ["precision", "WER %", "seconds", "identical hypotheses"],
                            [["fp32", f"{r['wer_fp32']:.2f}", f"{r['seconds_fp32']:.1f}", ""],
                             ["bf16", f"{r['wer_bf16']:.2f}", f"{r['seconds_bf16']:.1f}", f"{100 * r['same']:.1f} %"]])
                ratios["bf16_decode_wer_fp32"] = round(r["wer_fp32"], 3)
                ratios["bf16_decode_wer_bf16"] = round(r["wer_bf16"], 3)
    if "features" in sections:
        rows = []
        for threads in threads_list:
            r = run_worker("features", "ours", threads, reps=max(args.reps, 5))
            if "error" in r:
                rows.append([str(threads), r["error"], "", "", "", ""])
                continue
            x = r["knf_s"] / r["fbank_batch_s"]
            ratios[f"features_{threads}t_fbank_batch_vs_knf"] = round(x, 3)
            rows.append([str(threads), f"{r['audio_s'] / r['fbank_batch_s']:.0f}", f"{r['audio_s'] / r['fbank_s']:.0f}",
                         f"{r['audio_s'] / r['knf_s']:.0f}", f"{x:.2f}x",
                         f"{r['vs_knf_max_resolved']:.1e} / {r['vs_knf_max']:.1e} / {r['vs_knf_mean']:.1e}"])
        print_table(
            "Features: 80-bin fbank of the 58 LibriSpeech utterances in shared/data, seconds of audio per second",
            ["threads", "fbank_batch", "fbank (torchaudio f64)", "kaldi-native-fbank", "batch vs knf",
             "batch vs knf: max within 20 nats of the frame peak / max / mean diff"],
            rows,
        )
    print(json.dumps({"bench": "asr-vs-peers", "machine": machine(), "cpu": cpu_info().to_dict(), **ratios}))


if __name__ == "__main__":
    main()
