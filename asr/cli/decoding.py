"""Audio to text and text to numbers: ``asr decode|transcribe|score``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _decode_settings(args: argparse.Namespace, base):
    """The model's decode section with the command-line overrides applied."""
    keys = ("mode", "beam_size", "ctc_weight", "length_bonus", "max_frames", "precision", "lm_weight", "quantize_lm",
            "speed", "speeds", "rules", "max_len_ratio", "language", "task", "patience")
    over = {k: getattr(args, k, None) for k in keys}
    if over["speed"] is not None:  # one speed replaces the config's ensemble, and an ensemble its one speed
        over["speeds"] = []
    elif over["speeds"] is not None:
        over["speed"] = 1.0
    return base.updated(**over)


def _load(args: argparse.Namespace):
    """The recogniser of ``--model`` with ``--lm`` (or the model directory's default ``decode.lm``)."""
    from asr.inference import load_model

    rec = load_model(args.model, args.device)
    if args.lm:
        rec.use_lm(args.lm)
    cfg = _decode_settings(args, rec.config.decode)
    if cfg.lm_weight and rec.lm is None:
        raise ValueError(f"--lm-weight {cfg.lm_weight}: no LM to fuse; give --lm DIR (or decode.lm in the model's "
                         "config.yaml)")  # fmt: skip
    return rec, cfg


def _add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory (config.yaml, tokenizer.model, model.pt)")
    p.add_argument("--mode", choices=["attention", "ctc_greedy", "ctc_beam", "rescore"], help="default: model config")
    p.add_argument("--beam-size", type=int, help="default: the model config's decode.beam_size")
    p.add_argument("--ctc-weight", type=float, help="weight of CTC prefix scores (default: model config)")
    p.add_argument("--length-bonus", "--length-penalty", dest="length_bonus", type=float,
                   help="added to the score per output token (default: model config; --length-penalty: old name)")
    p.add_argument("--rules", choices=["asr", "espnet", "whisper"],
                   help="the search's rules (docs/search.md; default: the model config's decode.rules: espnet for "
                        "imported ESPnet models, whisper for Whisper models, else asr)")
    p.add_argument("--language", help="Whisper, multilingual models: the spoken language (en, de, ...; default: "
                   "detected per utterance)")
    p.add_argument("--task", choices=["transcribe", "translate"], help="Whisper, multilingual models: transcribe, "
                   "or translate into English (default: transcribe)")
    p.add_argument("--patience", type=float, help="Whisper's beam search: stop when beam x patience hypotheses "
                   "have ended (default: 1.0)")
    p.add_argument("--max-len-ratio", type=float,
                   help="longest output = ratio x encoder frames (default: the model config's; 0 with --rules "
                        "espnet: every frame, with ESPnet's end detection)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"],
                   help="default: the model config's decode.precision (fp32); auto: bf16 only on hardware with "
                        "native bf16 (GPUs, CPUs with AMX or AVX512-BF16)")
    p.add_argument("--lm", help="LM directory (asr lm train) fused by shallow fusion (default: the model config's "
                                "decode.lm)")  # fmt: skip
    p.add_argument("--lm-weight", type=float, help="weight of log p_lm per token (default: decode.lm_weight; 0: no LM)")
    p.add_argument("--quantize-lm", action=argparse.BooleanOptionalAction, default=None,
                   help="the LM's matrix products in int8 (faster fusion; default: decode.quantize_lm, off)")
    p.add_argument("--speed", type=_positive, default=None, metavar="F",
                   help="play the audio F times faster (resampled: pitch moves too, as training's speed perturbation) "
                        "before decoding (default: the model config's decode.speed, 1.0: as recorded)")
    p.add_argument("--speeds", type=_speeds, default=None, metavar="F,F,...",
                   help="a test-time ensemble: the audio played at each speed, the n-best of every one pooled and "
                        "rescored in all, the best mean score kept (default: the model config's decode.speeds)")


def add_decode(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decode", help="decode a manifest into hypotheses (JSON Lines: id, text, score)")
    _add_search_args(p)
    p.add_argument("--manifest", required=True, help="manifest (JSON Lines) to decode")
    p.add_argument("--out", required=True, help="hypotheses to write (JSON Lines)")
    p.add_argument("--max-frames", type=int, help="fbank frames per batch, padding included (default: model config)")
    p.add_argument("--batch-size", type=int, default=64, help="at most this many utterances per batch")
    p.add_argument("--num-workers", type=int, default=2, help="feature extraction processes")


def _positive(text: str) -> float:
    try:
        if float(text) > 0:
            return float(text)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")


def _speeds(text: str) -> list[float]:
    out = [_positive(x) for x in text.split(",")]
    if len(out) < 2:
        raise argparse.ArgumentTypeError(f"expected two or more speeds, comma-separated, got {text!r} (one: --speed)")
    return out


def run_decode(args: argparse.Namespace) -> int:
    from asr.data.manifest import read_manifest
    from asr.inference.decode_manifest import decode_manifest

    rec, cfg = _load(args)
    records = read_manifest(args.manifest)  # played at decode.speed, or at each of decode.speeds
    stats = decode_manifest(rec, records, args.out, cfg, args.max_frames, args.batch_size, args.num_workers)
    _write_decode_settings(args, cfg, stats)
    print(
        f"decoded {stats.decoded} utterances ({stats.audio_seconds / 3600:.2f} h) in {stats.wall_seconds:.1f} s: "
        f"RTF {stats.rtf:.4f} (mode {cfg.mode}, beam {cfg.beam_size}, ctc_weight {cfg.ctc_weight}, "
        f"lm_weight {cfg.lm_weight if rec.lm is not None else 0}) -> {args.out}"
    )
    if stats.failed:
        print(f"asr decode: {len(stats.failed)} utterances failed (unreadable audio): {', '.join(stats.failed[:10])}",
              file=sys.stderr)
        return 1
    return 0


def _write_decode_settings(args: argparse.Namespace, cfg: object, stats: object) -> None:
    """What produced ``--out``, beside it (``hyp.jsonl`` -> ``hyp.settings.json``): the model, the
    manifest, the effective search settings (config defaults with the command line applied), counts."""
    import dataclasses
    import json

    import torch

    record = {
        "model": str(Path(args.model).resolve()),
        "manifest": str(Path(args.manifest).resolve()),
        "decode": dataclasses.asdict(cfg),
        "lm": str(Path(args.lm).resolve()) if args.lm else (cfg.lm or None),  # --lm, else the default decode.lm
        "batch_size": args.batch_size,
        "device": args.device,
        "decoded": stats.decoded,
        "failed": stats.failed,
        "audio_seconds": round(stats.audio_seconds, 3),
        "wall_seconds": round(stats.wall_seconds, 3),
        "torch": torch.__version__,
    }
    path = Path(args.out).with_suffix(".settings.json")
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def add_transcribe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transcribe", help="transcribe audio files of any length")
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, ogg, mp3, sph, ...)")
    _add_search_args(p)
    p.add_argument("--format", choices=["text", "json", "srt", "vtt"], default="text")
    p.add_argument("--output-dir", help="write FILE's result to DIR/<name>.<format> instead of printing it")
    p.add_argument("--window", type=float, default=30.0, help="longest piece decoded at once, seconds")
    p.add_argument("--batch-size", type=int, default=8, help="pieces decoded together")


def run_transcribe(args: argparse.Namespace) -> int:


    from asr.features.audio import AudioError
    from asr.inference.transcribe import Transcriber, to_json, to_srt, to_vtt

    rec, cfg = _load(args)
    tr = Transcriber(rec, cfg, window=args.window, batch_size=args.batch_size)
    render = {"text": lambda t: t.text + "\n", "json": lambda t: to_json(t) + "\n", "srt": to_srt, "vtt": to_vtt}
    failed = 0
    for f in args.files:
        try:
            t = tr.transcribe_file(f)
        except AudioError as e:  # its message starts with the file name
            print(f"asr transcribe: {e}", file=sys.stderr)
            failed += 1
            continue
        except OSError as e:
            print(f"asr transcribe: {f}: {e}", file=sys.stderr)
            failed += 1
            continue
        out = render[args.format](t)
        if args.output_dir:
            d = Path(args.output_dir)
            d.mkdir(parents=True, exist_ok=True)
            ext = "txt" if args.format == "text" else args.format
            (d / f"{Path(f).stem}.{ext}").write_text(out, encoding="utf-8")
        elif args.format == "text" and len(args.files) > 1:
            print(f"{f}: {out}", end="")
        else:
            print(out, end="", flush=True)
    if failed:
        print(f"asr transcribe: {failed} of {len(args.files)} files failed", file=sys.stderr)
        return 1
    return 0


def add_score(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="WER/CER of hypotheses against references")
    p.add_argument("--ref", required=True, help="references: manifest / JSON Lines with id and text, or Kaldi text")
    p.add_argument("--hyp", required=True, help="hypotheses: `asr decode` output, JSON Lines or Kaldi text")
    p.add_argument("--report", help="write per-utterance alignments and the top confusions here")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    p.add_argument("--json-out", metavar="FILE", help="also write the JSON object to FILE (recipes collect these)")
    p.add_argument("--normalizer", default="librispeech", help="text normaliser for both sides: librispeech, "
                   "whisper (Whisper's English normaliser, for written-form output; the 'whisper' extra) or none")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% interval")


def run_score(args: argparse.Namespace) -> int:
    import json

    from asr.scoring import read_transcripts, score

    res = score(read_transcripts(args.ref), read_transcripts(args.hyp), args.normalizer, args.bootstrap)
    if args.report:
        Path(args.report).write_text(res.report(), encoding="utf-8")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res.to_dict()) + "\n", encoding="utf-8")
    print(json.dumps(res.to_dict()) if args.json else res.summary())
    return 0


def add_results(sub) -> None:
    p = sub.add_parser("results", help="write a recipe's RESULTS.md from its scored decodings")
    p.add_argument("--exp", type=Path, help="the experiment folder (its train_log.jsonl gives time and precision)")
    p.add_argument("--model", type=Path, help="model directory whose decode_<set>/wer.json are read")
    p.add_argument("--sets", nargs="+")
    p.add_argument("--decode", default="", help="decoding settings, as text")
    p.add_argument("--lm", type=Path, help="LM directory: adds the rows of MODEL/decode_lm_<set>/wer.json (decoded "
                   "with it) and its perplexity per set (LM/ppl_<set>.json)")  # fmt: skip
    p.add_argument("--lm-decode", default="", help="decoding settings with the LM, as text")
    p.add_argument("--also", nargs=3, action="append", default=[], metavar=("FOLDER", "LABEL", "DECODING"),
                   help="more rows: MODEL/FOLDER_<set>/wer.json, labelled '<set> LABEL' (--loso: a column), "
                   "decoded as DECODING (text); repeatable")  # fmt: skip
    p.add_argument("--also-for", nargs=4, action="append", default=[], metavar=("SET", "FOLDER", "LABEL", "DECODING"),
                   help="as --also, for one set only (e.g. a model adapted to the test set); --loso: a column when "
                   "SET is test")  # fmt: skip
    p.add_argument("--title", default="Results")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--loso", action="store_true", help="one row per held-out speaker (--exp-prefix, --speakers)")
    p.add_argument("--exp-prefix", default="", help="--loso: experiment folders are PREFIX<speaker>")
    p.add_argument("--speakers", nargs="+", default=[])
    p.add_argument("--model-name", default="avg5", help="--loso: the model directory inside each experiment")


def run_results(args) -> int:
    from asr.results import write_results

    print(f"wrote {write_results(args)}")
    return 0
