"""One fine-tuning step of a Whisper tiny.en-sized model, asr against transformers, same weights, same batch.

A step is forward, backward and an AdamW update, fp32, 2 threads, on 8 LibriSpeech utterances of
../shared/data with their transcripts (Whisper's prompt, then the text tokens and end of text; the
prompt's positions are not counted by either loss). transformers: WhisperForConditionalGeneration with
``labels`` (its encoder takes 30-second windows only). asr: the same weights imported with
``asr import whisper``, (a) on the same 30-second windows, the like-for-like comparison, and (b) on each
utterance's real frames (``data.pad_to: 0``, what the FSDD recipe fine-tunes with). The weights are
random (transformers' initialisation; speed does not depend on them). The steps alternate, three
times each after one warm-up; the table gives the median and the ratio. The process is set up as
``asr train`` sets it up (``asr.speed.configure_process``: freed memory kept for the next step), which
serves transformers' steps in the same process alike.

Then the floor: each step's arithmetic (``torch.utils.flop_counter`` plus the products it leaves out,
``bench_train.uncounted_product_flops``) at this CPU's rate on one 2048^3 float32 product (best of
five), and the most any step on the 30-second windows could gain over transformers' at that rate.
Prints two Markdown tables and a JSON line.

    tools/peers/.venv-whisper/bin/python tools/bench_whisper_train.py [--utterances 8] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import common
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utterances", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    from bench_train import product_rate, uncounted_product_flops
    from torch.utils.flop_counter import FlopCounterMode

    from asr import speed

    speed.configure_process()
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from asr.checkpoint import load_init_weights
    from asr.config import load_config
    from asr.features import compute_features
    from asr.importers.whisper import import_whisper
    from asr.model import ASRModel
    from asr.whisper_text import WhisperTokenizer

    root = common.data_root()
    utts = sorted((u for u in common.librispeech_utterances(root) if "test-other" in u["path"]), key=lambda u: u["id"])
    utts = utts[: args.utterances]
    wavs = [common.read_wav(root / u["path"]) for u in utts]
    tok_dir = common.REPO / "tests" / "fixtures" / "whisper" / "en" / "hf"  # Whisper's English tokenizer
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / "hf"
        torch.manual_seed(0)
        cfg = WhisperConfig(vocab_size=51864, num_mel_bins=80, d_model=384, encoder_layers=4, decoder_layers=4,
                            encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
                            decoder_ffn_dim=1536, max_source_positions=1500, max_target_positions=448)
        hf = WhisperForConditionalGeneration(cfg)
        hf.save_pretrained(hf_dir, safe_serialization=True)
        shutil.copy(tok_dir / "tokenizer.json", hf_dir / "tokenizer.json")
        ours_dir = import_whisper(hf_dir, Path(tmp) / "asr")
        acfg = load_config(ours_dir / "config.yaml")
        tok = WhisperTokenizer.for_model(ours_dir, acfg.model.vocab_size)
        texts = [tok.encode(u["text"].lower()) for u in utts]
        prompt = acfg.model.prompt
        # the batch, both ways: transformers' (decoder input, labels) and asr's (tokens, lengths)
        width = max(map(len, texts)) + len(prompt)
        dec_in = torch.full((len(texts), width), tok.eot)
        labels = torch.full((len(texts), width), -100)
        for i, t in enumerate(texts):
            seq = prompt + t
            dec_in[i, : len(seq)] = torch.tensor(seq)
            labels[i, len(prompt) - 1 : len(seq)] = torch.tensor([*t, tok.eot])
        tokens = torch.zeros(len(texts), max(map(len, texts)), dtype=torch.long)
        for i, t in enumerate(texts):
            tokens[i, : len(t)] = torch.tensor(t)
        token_lens = torch.tensor([len(t) for t in texts])
        feats30 = torch.stack(compute_features(wavs, acfg.data))  # (B, 3000, 80)
        acfg.data.pad_to = 0.0
        real = compute_features(wavs, acfg.data)
        real_lens = torch.tensor([f.shape[0] for f in real])
        feats_real = torch.nn.utils.rnn.pad_sequence(real, batch_first=True)
        mel30 = feats30.transpose(1, 2).contiguous()  # transformers' (B, 80, 3000)

        hf.train()
        hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-5)
        ours = ASRModel(acfg.model)
        load_init_weights(ours, ours_dir / "model.pt")
        ours.train()
        our_opt = torch.optim.AdamW(ours.parameters(), lr=1e-5)

        def hf_step():
            out = hf(input_features=mel30, decoder_input_ids=dec_in, labels=labels)
            out.loss.backward()
            hf_opt.step()
            hf_opt.zero_grad(set_to_none=True)

        def our_step(feats, lens):
            out = ours(feats, lens, tokens, token_lens)
            out["loss"].backward()
            our_opt.step()
            our_opt.zero_grad(set_to_none=True)

        full = torch.full_like(real_lens, feats30.shape[1])
        steps = {"transformers": hf_step, "asr, 30 s windows": lambda: our_step(feats30, full),
                 "asr, real lengths": lambda: our_step(feats_real, real_lens)}
        times: dict[str, list[float]] = {k: [] for k in steps}
        for f in steps.values():
            f()  # warm-up
        flops = {}
        for name, f in steps.items():
            with FlopCounterMode(display=False) as fc:
                flops[name] = uncounted_product_flops(f)
            flops[name] += fc.get_total_flops()
        for _ in range(args.reps):
            for name, f in steps.items():
                t0 = time.perf_counter()
                f()
                times[name].append(time.perf_counter() - t0)
    rate = product_rate("fp32")
    med = {k: statistics.median(v) for k, v in times.items()}
    audio = sum(w.numel() for w in wavs) / 16000
    rows = [[k, f"{med[k]:.2f}", f"{med['transformers'] / med[k]:.2f}x"] for k in steps]
    common.print_table(f"one fine-tuning step (forward, backward, AdamW), tiny.en size, {len(wavs)} utterances "
                       f"({audio:.0f} s), fp32, 2 threads, {common.machine()}", ["", "s / step", "vs transformers"],
                       rows)
    floor = {k: flops[k] / rate for k in steps}
    rows = [[k, f"{flops[k] / 1e9:.0f}", f"{floor[k]:.2f}", f"{med[k]:.2f}", f"{floor[k] / med[k]:.0%}"]
            for k in steps]
    common.print_table(f"the floor: each step's arithmetic at {rate / 1e9:.0f} GFLOP/s (one 2048^3 float32 "
                       f"product, best of five); at most {med['transformers'] / floor['asr, 30 s windows']:.2f}x "
                       "transformers' step on the 30 s windows",
                       ["", "GFLOP", "floor s", "measured s", "floor / measured"], rows)
    print(json.dumps({"cpu": common.machine(), "utterances": len(wavs), "seconds_per_step": med,
                      "vs_transformers": {k: med["transformers"] / v for k, v in med.items()},
                      "gflop_per_step": {k: v / 1e9 for k, v in flops.items()}, "product_gflops": rate / 1e9,
                      "floor_s": floor}))


if __name__ == "__main__":
    main()
