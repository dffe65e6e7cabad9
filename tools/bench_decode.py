"""Decoding speed: our batched search against a textbook one-utterance-at-a-time beam search.

The 100 h model (random weights, vocabulary 5000), 16 utterances of 10 s (random fbank; the
search does the same work whatever the input), every output forced to 30 tokens (eos
suppressed before, forced after) so that all variants do equal work. For each variant:

  ours      all utterances x beams in one decoder call per step, KV cache, cross-attention K/V
            once per utterance, vectorised CTC prefix scores (asr.decode.beam_search / greedy_search)
  textbook  one utterance at a time; each step runs the decoder over the whole prefix of every
            hypothesis (no cache; the beam's hypotheses share one call) and, with CTC, the prefix
            scores of ESPnet's CTCPrefixScoreTH recursion looped over frames

Both include the encoder. Prints a table and one JSON line; checks that both find the same
hypotheses.

    python tools/bench_decode.py [--utts 16] [--seconds 10] [--beam 10] [--tokens 30]
    python tools/bench_decode.py --device cuda --precision bf16 --utts 64   # ours only (no textbook)
    python tools/bench_decode.py --split --vocab 500 --frontend conv2d --threads 2   # where ours spends its time

``--split`` times only our batched beam search with CTC (as ``tools/bench.py`` decodes: the 100 h
model with vocabulary 500 and the conv2d frontend there), medians of ``--reps`` runs after one
warm-up: the frontend (CMVN and the convolutions with their projection), the encoder's layers,
and in the search the decoder's steps, their matrix products alone (the same Linear layers on
inputs of the same shapes, as many times), the CTC prefix scores, the reorders of the decoder's
self-attention cache with the beams, and the rest.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import statistics
import time

import torch
from common import REPO

from asr import speed
from asr.config import load_config
from asr.decode import beam_search, greedy_search
from asr.decode.ctc_prefix_score import CTCPrefixScorer
from asr.hardware import cpu_info
from asr.model import ASRModel
from asr.model.kv_cache import KVCache


def textbook_ctc_scores(x, r_prev, last, cand, length, blank):
    """ESPnet-style prefix scores of one utterance's hypotheses, recursion looped over frames.

    x: (T, V) CTC log-probs; r_prev: (T, 2, N); last: (N,); cand: (N, K). Returns psi (N, K), r (T, 2, N, K).
    """
    t_len = x.shape[0]
    xs = x[:, cand]  # (T, N, K)
    xb = x[:, blank].view(-1, 1, 1)
    r = torch.full((t_len, 2) + cand.shape, -math.inf, dtype=x.dtype)
    if length == 0:
        r[0, 0] = xs[0]
    r_sum = torch.logaddexp(r_prev[:, 0], r_prev[:, 1])  # (T, N)
    phi = r_sum.unsqueeze(2).repeat(1, 1, cand.shape[1])
    rep = cand == last.unsqueeze(1)
    phi[:, rep] = r_prev[:, 1].unsqueeze(2).expand_as(phi)[:, rep]
    psi = r[0, 0].clone()
    for t in range(1, t_len):
        r[t, 0] = torch.logaddexp(r[t - 1, 0], phi[t - 1]) + xs[t]
        r[t, 1] = torch.logaddexp(r[t - 1, 0], r[t - 1, 1]) + xb[t]
        psi = torch.logaddexp(psi, phi[t - 1] + xs[t])
    return psi, r


@torch.inference_mode()
def textbook_beam_search(model, feats, beam, ctc_weight, n_tokens):
    """One utterance (1, T, F): plain beam search recomputing the decoder over each full prefix."""
    memory, mem_lens = model.encode(feats, torch.tensor([feats.shape[1]]))
    eos, blank, v = model.eos_id, 0, model.vocab_size
    hyps = [[model.sos_id]]
    scores = torch.zeros(1)
    if ctc_weight > 0:
        x = model.ctc_log_probs(memory)[0].double()  # (T, V)
        r = torch.stack([torch.full((x.shape[0],), -math.inf, dtype=x.dtype), x[:, blank].cumsum(0)], 1)
        r_prev, psi_prev, last = r.unsqueeze(2), torch.zeros(1, dtype=x.dtype), torch.tensor([-1])
    for step in range(n_tokens + 1):
        ys = torch.tensor(hyps)  # (N, step + 1): the whole prefix, recomputed every step
        n = ys.shape[0]
        logits = model.decoder(ys, memory.expand(n, -1, -1), mem_lens.expand(n))[:, -1]
        att = torch.log_softmax(logits.float(), -1)
        att[:, blank] = -math.inf
        if step < n_tokens:
            att[:, eos] = -math.inf
        else:  # forced end
            att[:, :eos] = -math.inf
        if ctc_weight > 0:
            pre = att.clone()
            pre[:, eos] = -math.inf
            cand = torch.cat([pre.topk(int(1.5 * beam), -1).indices, torch.full((n, 1), eos)], 1)  # (N, K)
            psi, r = textbook_ctc_scores(x, r_prev, last, cand, step, blank)
            psi[:, -1] = torch.logaddexp(r_prev[-1, 0], r_prev[-1, 1])  # eos: the whole prefix
            cand_scores = (1 - ctc_weight) * att.gather(1, cand) + ctc_weight * (psi - psi_prev.unsqueeze(1)).float()
        else:
            cand = torch.arange(v).expand(n, v)
            cand_scores = att
        total = (scores.unsqueeze(1) + cand_scores).flatten()
        top, idx = total.topk(beam if step < n_tokens else 1)
        k = cand.shape[1]
        parent, col = (idx // k).tolist(), (idx % k).tolist()
        tokens = [int(cand[p, c]) for p, c in zip(parent, col, strict=True)]
        if step == n_tokens:
            return hyps[parent[0]][1:], float(top[0])
        hyps = [hyps[p] + [t] for p, t in zip(parent, tokens, strict=True)]
        scores = top
        if ctc_weight > 0:
            p_t, c_t = torch.tensor(parent), torch.tensor(col)
            r_prev, psi_prev, last = r[:, :, p_t, c_t], psi[p_t, c_t], torch.tensor(tokens)
    raise AssertionError("unreachable")


@torch.inference_mode()
def textbook_greedy(model, feats, n_tokens):
    memory, mem_lens = model.encode(feats, torch.tensor([feats.shape[1]]))
    ys = [model.sos_id]
    for _ in range(n_tokens):
        logits = model.decoder(torch.tensor([ys]), memory, mem_lens)[0, -1]
        logits[0] = logits[model.eos_id] = -math.inf
        ys.append(int(logits.argmax()))
    return ys[1:]


@torch.inference_mode()
def ours(model, feats, lens, beam, ctc_weight, n_tokens, bf16=False):
    with torch.autocast(feats.device.type, dtype=torch.bfloat16, enabled=bf16):
        memory, mem_lens = model.encode(feats, lens)
        if beam == 1 and ctc_weight == 0:
            return [(h, None) for h in greedy_search(model, memory, mem_lens, max_len=n_tokens, min_len=n_tokens)]
        out = beam_search(
            model, memory, mem_lens, beam_size=beam, ctc_weight=ctc_weight, max_len=n_tokens, min_len=n_tokens
        )
    return [(h[0].tokens, h[0].score) for h in out]


@contextlib.contextmanager
def _timed(obj, name: str, totals: dict, key: str):
    """Add the seconds spent in ``obj.name`` to ``totals[key]`` (and count the calls) inside the block."""
    inner = getattr(obj, name)

    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            totals[key] += time.perf_counter() - t0
            totals[key + "_calls"] += 1

    setattr(obj, name, wrapper)
    try:
        yield
    finally:
        if isinstance(obj, type):
            setattr(obj, name, inner)
        else:
            delattr(obj, name)  # the instance attribute goes; the class's method shows again


@torch.inference_mode()
def _decoder_products(model, rows: int, steps: int) -> float:
    """Seconds of the decoder's matrix products of ``steps`` steps over ``rows`` hypotheses, alone."""
    dec = model.decoder
    d = dec.embed.weight.shape[1]
    x = torch.randn(rows, 1, d)
    h = torch.randn(rows, 1, dec.layers[0].ffn[0].out_features)
    t0 = time.perf_counter()
    for _ in range(steps):
        for layer in dec.layers:
            attn, cross, ffn = layer.self_attn, layer.cross_attn, layer.ffn
            for module, inp in ((attn.qkv, x), (attn.out, x), (cross.q, x), (cross.out, x), (ffn[0], x), (ffn[3], h)):
                module(inp)
        dec.logits(x[:, 0])
    return time.perf_counter() - t0


def split(model, feats, lens, beam: int, ctc_weight: float, n_tokens: int, reps: int) -> dict:
    """Medians over ``reps`` runs (after one warm-up) of where our batched beam search spends its time."""
    runs = []
    for rep in range(reps + 1):
        t = collections.defaultdict(float)
        with (_timed(model.frontend, "forward", t, "frontend"), _timed(model.encoder, "forward", t, "encoder_layers"),
              _timed(model.decoder, "step", t, "decoder_steps"), _timed(CTCPrefixScorer, "score", t, "ctc"),
              _timed(CTCPrefixScorer, "extend", t, "ctc"),
              _timed(KVCache, "index_select", t, "kv_reorders")):  # fmt: skip
            t0 = time.perf_counter()
            ours(model, feats, lens, beam, ctc_weight, n_tokens)
            t["total"] = time.perf_counter() - t0
        t["search"] = t["total"] - t["frontend"] - t["encoder_layers"]
        t["decoder_products_alone"] = _decoder_products(model, feats.shape[0] * beam, int(t["decoder_steps_calls"]))
        t["search_rest"] = t["search"] - t["decoder_steps"] - t["ctc"] - t["kv_reorders"]
        if rep:
            runs.append(t)
    keys = ("total", "frontend", "encoder_layers", "search", "decoder_steps", "decoder_products_alone", "ctc",
            "kv_reorders", "search_rest")  # fmt: skip
    return {k: round(statistics.median(r[k] for r in runs), 4) for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "configs/librispeech/transformer_100h.yaml"))
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--utts", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--ctc-weight", type=float, default=0.3)
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--skip-textbook", action="store_true")
    ap.add_argument("--device", default="cpu", help="cuda: ours only (the textbook search is fp32 CPU code)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast, ours only")
    ap.add_argument("--frontend", default="", help="model.frontend (default: the config's)")
    ap.add_argument("--split", action="store_true", help="where our beam search with CTC spends its time (CPU, fp32)")
    ap.add_argument("--reps", type=int, default=3, help="--split: timed runs (medians)")
    args = ap.parse_args()
    device = torch.device(args.device)
    bf16 = args.precision == "bf16"
    info = cpu_info()
    if device.type == "cpu":
        print(f"CPU: {info.summary()}")
        if bf16 and not info.native_bf16:
            print("bf16 skipped: this CPU has no native bf16 arithmetic (emulated bf16 is many times slower than fp32)")
            print(json.dumps({"bench": "decode", "cpu": info.to_dict(), "skipped": ["bf16"]}))
            return
    args.skip_textbook |= device.type != "cpu" or bf16  # the textbook search is the fp32 CPU reference
    if args.threads:
        torch.set_num_threads(args.threads)
    speed.configure_process()  # as the command line does at start-up (heap_reuse)
    sets = [f"model.vocab_size={args.vocab}"] + ([f"model.frontend={args.frontend}"] if args.frontend else [])
    cfg = load_config(args.config, sets)
    torch.manual_seed(0)
    model = ASRModel(cfg.model).eval().to(device)
    frames = int(args.seconds * 100)
    feats = torch.randn(args.utts, frames, cfg.model.input_dim, device=device)
    lens = torch.full((args.utts,), frames, device=device)
    if args.split:
        if device.type != "cpu" or bf16:
            raise SystemExit("bench_decode --split: CPU and fp32 only")
        res = split(model, feats, lens, args.beam, args.ctc_weight, args.tokens, args.reps)
        print(f"ours, beam {args.beam} + CTC {args.ctc_weight}, {args.utts} x {args.seconds:g} s, frontend "
              f"{cfg.model.frontend}, vocabulary {args.vocab}, {torch.get_num_threads()} threads, medians of "
              f"{args.reps}")
        print("| part | seconds |\n|---|---|")
        for k, v in res.items():
            print(f"| {k.replace('_', ' ')} | {v:.3f} |")
        print(json.dumps({"bench": "decode_split", "cpu": info.to_dict(), "frontend": cfg.model.frontend,
                          "vocab": args.vocab, "utts": args.utts, **res}))  # fmt: skip
        return
    variants = [
        (f"beam {args.beam} + CTC {args.ctc_weight}", args.beam, args.ctc_weight),
        (f"beam {args.beam}, no CTC", args.beam, 0.0),
        ("greedy", 1, 0.0),
    ]
    ours(model, feats[:2, :200], lens[:2].clamp_max(200), 2, args.ctc_weight, 3, bf16)  # warm-up
    rows = []
    record = {"utts": args.utts, "seconds": args.seconds, "tokens": args.tokens, "threads": torch.get_num_threads(),
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "precision": args.precision, "cpu": info.to_dict() if device.type == "cpu" else None}  # fmt: skip
    for name, beam, w in variants:
        t0 = time.perf_counter()
        ours_out = ours(model, feats, lens, beam, w, args.tokens, bf16)  # hypotheses come back as lists: synced
        t_ours = time.perf_counter() - t0
        assert all(len(h) == args.tokens for h, _ in ours_out)
        t_text, agree = math.nan, None
        if not args.skip_textbook:
            t0 = time.perf_counter()
            text_out = []
            for i in range(args.utts):
                if beam == 1 and w == 0:
                    text_out.append(textbook_greedy(model, feats[i : i + 1], args.tokens))
                else:
                    text_out.append(textbook_beam_search(model, feats[i : i + 1], beam, w, args.tokens)[0])
            t_text = time.perf_counter() - t0
            agree = sum(a == b for (a, _), b in zip(ours_out, text_out, strict=True))
        ups_ours, ups_text = args.utts / t_ours, args.utts / t_text
        rows.append((name, ups_ours, ups_text, ups_ours / ups_text, agree))
        key = name.split(",")[0].replace(" + ", "_").replace(" ", "").lower() if w == 0 else f"beam{beam}_ctc"
        key = {"greedy": "greedy"}.get(name, key if w else f"beam{beam}_noctc")
        record[key] = {
            "ours_utt_per_s": round(ups_ours, 3),
            "textbook_utt_per_s": round(ups_text, 3),
            "speedup": round(ups_ours / ups_text, 2),
            "same_hypotheses": agree,
        }
    print(f"{'variant':<22}{'ours utt/s':>12}{'textbook utt/s':>16}{'speed-up':>10}{'same hyps':>11}")
    for name, a, b, s, agree in rows:
        print(f"{name:<22}{a:>12.2f}{b:>16.2f}{s:>9.1f}x{agree!s:>11}")
    print(json.dumps(record))
    differ = [name for name, *_, agree in rows if agree is not None and agree != args.utts]
    if differ:  # a speed-up only counts when both searches find the same hypotheses
        raise SystemExit(f"bench_decode: our search and the textbook one disagree on some utterances in: {differ}")


if __name__ == "__main__":
    main()
