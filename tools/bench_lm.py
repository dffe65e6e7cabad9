"""Decoding speed with shallow fusion: the batched joint CTC/attention beam search with a
language model against the same search without one.

The 100 h model (random weights, vocabulary 5000) and the LibriSpeech LM config
(configs/librispeech/lm_transformer.yaml: 16 layers, d_model 512; random weights, same vocabulary);
16 utterances of 10 s (random fbank; the search does the same work whatever the input), every
output forced to 30 tokens (eos suppressed before, forced after) so that every variant does equal
work; beam 10, CTC weight 0.3, 2 threads by default. Encoder included. ``--lstm`` adds an LSTM LM
(2 x 1024, ESPnet's LibriSpeech RNN LM size). Each LM runs as it is and with int8 products
(``--quantize-lm``, ``asr.lm.quantize``: the "int8" rows). The target of issue 19: the Transformer
LM costs at most 1.5x the time of decoding without it. Prints a table and one JSON line.

    python tools/bench_lm.py [--utts 16] [--seconds 10] [--beam 10] [--tokens 30] [--threads 2] [--lstm]
                             [--precision fp32|auto|bf16] [--split]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import REPO

from asr import speed
from asr.config import load_config
from asr.decode import beam_search
from asr.hardware import autocast, cpu_info, resolve_precision
from asr.lm import LMConfig, build_lm, load_lm_config
from asr.lm.quantize import Int8Linear, quantize_lm
from asr.model import ASRModel


@torch.inference_mode()
def decode(model, feats, lens, beam, ctc_weight, n_tokens, lm=None, lm_weight=0.0, precision="fp32"):
    """The search timed here, in autocast for ``precision`` (resolved) as `asr decode` runs it."""
    with autocast(precision, "cpu"):
        memory, mem_lens = model.encode(feats, lens)
        out = beam_search(model, memory, mem_lens, beam_size=beam, ctc_weight=ctc_weight, max_len=n_tokens,
                          min_len=n_tokens, lm=lm, lm_weight=lm_weight)  # fmt: skip
    return [h[0].tokens for h in out]


def products_alone(lm, rows: int, steps: int, precision: str) -> float:
    """Seconds of ``steps`` steps of the LM's matrix products alone: every Linear (int8 ones
    included, with their rounding) and the output layer on random (rows, features) inputs."""
    linears = [m for m in lm.modules() if isinstance(m, (torch.nn.Linear, Int8Linear))]
    x = {m.in_features: torch.randn(rows, m.in_features) for m in linears}
    x.setdefault(lm.cfg.d_model, torch.randn(rows, lm.cfg.d_model))
    with torch.inference_mode(), autocast(precision, "cpu"):
        t0 = time.perf_counter()
        for _ in range(steps):
            for m in linears:
                m(x[m.in_features])
            if lm.output is None:  # tied: the product through the embedding, not a module of its own
                lm._logits(x[lm.cfg.d_model])
        return time.perf_counter() - t0


def attention_alone(lm, rows: int, steps: int) -> float:
    """Seconds of the self-attention of ``steps`` steps over the search's KV cache
    (``asr.model.kv_cache``), one query per row and layer, each step's keys and values appended."""
    from asr.model.kv_cache import KVCache

    cfg = lm.cfg
    d_k = cfg.d_model // cfg.heads
    cache = KVCache(cfg.layers)
    kv, q = torch.randn(rows, 2, cfg.heads, d_k), torch.randn(rows, cfg.heads, 1, d_k)
    with torch.inference_mode():
        t0 = time.perf_counter()
        for _ in range(steps):
            for slot in cache.slots():
                torch.nn.functional.scaled_dot_product_attention(q, *slot.append(kv))
            cache.advance()
        return time.perf_counter() - t0


def split(model, lm, feats, lens, args, precision: str) -> dict[str, float]:
    """Where the Transformer LM's time goes inside one fused search: its steps (``lm.step``), the
    reorders of its KV cache (the decoder's included; with the mean share of rows a reorder moves),
    and, for scale, the same number of steps of its matrix products alone (as they are and int8)
    and of its attention over a cache alone."""
    from asr.model.kv_cache import KVCache

    spent = {"lm_steps": 0.0, "kv_reorders": 0.0}
    step, reorder = lm.step, KVCache.index_select

    def timed(key, fn):
        def wrapper(*a):
            t0 = time.perf_counter()
            out = fn(*a)
            spent[key] += time.perf_counter() - t0
            return out

        return wrapper

    moved: list[float] = []  # per reorder of a full-size cache: the share of rows that change

    def counted(cache, index):
        if cache._buf is not None and index.numel() == cache._buf.shape[0]:
            moved.append(float((index != torch.arange(index.numel())).float().mean()))
        return reorder(cache, index)

    lm.step, KVCache.index_select = timed("lm_steps", step), timed("kv_reorders", counted)
    try:
        decode(model, feats, lens, args.beam, args.ctc_weight, args.tokens, lm, args.lm_weight, precision)
    finally:
        lm.step, KVCache.index_select = step, reorder
    rows, steps = args.utts * args.beam, args.tokens + 1  # + 1: the step that scores eos
    spent["lm_products_alone"] = products_alone(lm, rows, steps, precision)
    spent["lm_int8_products_alone"] = products_alone(quantize_lm(lm), rows, steps, precision)
    spent["lm_attention_alone"] = attention_alone(lm, rows, steps)
    out = {k: round(v, 3) for k, v in spent.items()}
    out["rows_moved_per_reorder"] = round(sum(moved) / max(1, len(moved)), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "configs/librispeech/transformer_100h.yaml"))
    ap.add_argument("--lm-config", default=str(REPO / "configs/librispeech/lm_transformer.yaml"))
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--utts", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--beam", type=int, default=10)
    ap.add_argument("--ctc-weight", type=float, default=0.3)
    ap.add_argument("--lm-weight", type=float, default=0.6)
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (0: torch's default)")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per variant, in turn (the best counts)")
    ap.add_argument("--lstm", action="store_true", help="also an LSTM LM (2 layers of 1024)")
    ap.add_argument("--split", action="store_true",
                    help="also where the Transformer LM's time goes: its steps, KV-cache reorders (the decoder's "
                         "included), its products alone")
    ap.add_argument("--precision", choices=["fp32", "auto", "bf16"], default="fp32",
                    help="autocast around the whole search, as `asr decode --precision` (auto: bf16 only "
                         "on a CPU with native bf16)")
    args = ap.parse_args()
    info = cpu_info()
    print(f"CPU: {info.summary()}")
    if args.threads:
        torch.set_num_threads(args.threads)
    speed.configure_process()  # as the command line does at start-up (heap_reuse)
    precision = resolve_precision(args.precision, "cpu", "--precision")
    cfg = load_config(args.config, [f"model.vocab_size={args.vocab}"])
    torch.manual_seed(0)
    model = ASRModel(cfg.model).eval()
    lm_cfg = load_lm_config(args.lm_config).lm
    lm_cfg.vocab_size = args.vocab
    lms = {"Transformer LM": build_lm(lm_cfg).eval()}
    if args.lstm:
        lms["LSTM LM"] = build_lm(LMConfig(type="lstm", vocab_size=args.vocab, d_model=1024, layers=2)).eval()
    frames = int(args.seconds * 100)
    feats = torch.randn(args.utts, frames, cfg.model.input_dim)
    lens = torch.full((args.utts,), frames)
    variants = [("no LM", None)]
    for name, lm in lms.items():
        variants += [(name, lm), (f"{name} int8", quantize_lm(lm))]
    for _, lm in variants:  # warm-up
        decode(model, feats[:2, :200], lens[:2].clamp_max(200), 2, args.ctc_weight, 3, lm, args.lm_weight, precision)
    record = {"bench": "lm", "utts": args.utts, "seconds": args.seconds, "beam": args.beam, "tokens": args.tokens,
              "ctc_weight": args.ctc_weight, "lm_weight": args.lm_weight, "threads": torch.get_num_threads(),
              "precision": precision, "lm_layers": lm_cfg.layers, "lm_d_model": lm_cfg.d_model,
              "cpu": info.to_dict()}  # fmt: skip
    best = {name: float("inf") for name, _ in variants}
    for _ in range(args.repeats):  # the variants in turn, so that a drifting machine slows them alike
        for name, lm in variants:
            t0 = time.perf_counter()
            hyps = decode(model, feats, lens, args.beam, args.ctc_weight, args.tokens, lm, args.lm_weight, precision)
            best[name] = min(best[name], time.perf_counter() - t0)
            assert all(len(h) == args.tokens for h in hyps)
    base = best["no LM"]
    print(f"{'variant':<21}{'seconds':>10}{'utt/s':>10}{'x no LM':>10}")
    for name, t in best.items():
        ups, x = args.utts / t, t / base
        print(f"{name:<21}{t:>10.2f}{ups:>10.2f}{x:>9.2f}x")
        record[name.lower().replace(" ", "_")] = {"seconds": round(t, 3), "utt_per_s": round(ups, 3),
                                                  "x_no_lm": round(x, 3)}  # fmt: skip
    if args.split:
        record["transformer_lm_split"] = parts = split(model, lms["Transformer LM"], feats, lens, args, precision)
        print("Transformer LM: " + ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in parts.items()))
    print(json.dumps(record))


if __name__ == "__main__":
    main()
