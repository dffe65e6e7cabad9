"""The ``asr`` command: parse arguments, call the library, print. Nothing else lives here.

Each subcommand has an ``add_<name>`` function that declares its arguments and a ``run_<name>``
function that does the work; ``COMMANDS`` lists them in the order ``asr --help`` shows.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import __version__


def add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print the model size and structure for a config")
    p.add_argument("--config", help="experiment YAML (defaults: the 100 h model)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--vocab-size", type=int, default=5000, help="vocabulary size when the config leaves it 0")


def run_info(args: argparse.Namespace) -> int:
    from .config import load_config
    from .model import ASRModel

    cfg = load_config(args.config, args.overrides)
    if cfg.model.vocab_size == 0:
        cfg.model.vocab_size = args.vocab_size
    model = ASRModel(cfg.model)
    m = cfg.model
    stack = m.stack if m.frontend == "linear" else m.conv_stack
    print(
        f"frontend={m.frontend} stack={stack} d_model={m.d_model} heads={m.heads} ffn={m.ffn_dim} "
        f"encoder_layers={m.encoder_layers} decoder_layers={m.decoder_layers} norm={m.norm} vocab={m.vocab_size}"
    )
    print(f"parameters: {model.num_parameters():,}")
    return 0


def add_download(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("download", help="fetch a corpus (librispeech, fsdd); what is there is not fetched again")
    corpora = p.add_subparsers(dest="corpus", metavar="CORPUS", required=True)
    ls = corpora.add_parser("librispeech", help="LibriSpeech subsets from OpenSLR 12 (resumable, MD5-checked)")
    ls.add_argument("--corpus-dir", required=True, help="the subsets land in CORPUS_DIR/LibriSpeech/<subset>")
    ls.add_argument("--subsets", nargs="+", required=True, metavar="SUBSET")
    ls.add_argument("--mirror", default=None, help="base URL holding <subset>.tar.gz (default: openslr.org)")
    ls.add_argument("--keep-archives", action="store_true", help="keep the .tar.gz files after extraction")
    fs = corpora.add_parser("fsdd", help="the Free Spoken Digit Dataset: check CORPUS_DIR's recordings, or fetch "
                            "a pinned upstream commit (each recording SHA-256-checked before extraction)")
    fs.add_argument("--corpus-dir", required=True,
                    help="holds recordings/ (checked against its SHA256SUMS when it has one, e.g. corpora/fsdd); "
                    "a download lands in CORPUS_DIR/free-spoken-digit-dataset")
    fs.add_argument("--no-fetch", action="store_true", help="only check the recordings CORPUS_DIR holds; fetch nothing")
    fs.add_argument("--url", default=None, help="the archive to fetch (default: FSDD's pinned commit on GitHub)")
    fs.add_argument("--sha256", default=None, help="SHA-256 of the whole archive, when known")


def run_download(args: argparse.Namespace) -> int:
    from .data.download import DownloadError

    try:
        if args.corpus == "librispeech":
            from .data.librispeech import OPENSLR_URL, download_librispeech

            dirs = download_librispeech(
                args.corpus_dir, args.subsets, args.mirror or OPENSLR_URL, keep_archives=args.keep_archives
            )
            for d in dirs:
                print(d)
        else:
            from .data.fsdd import FSDD_URL, download_fsdd, verify_fsdd

            if not args.no_fetch:
                download_fsdd(args.corpus_dir, args.url or FSDD_URL, args.sha256)
            rec, checked = verify_fsdd(args.corpus_dir)
            print(f"{rec}: {checked} files match SHA256SUMS" if checked is not None else f"{rec}: no SHA256SUMS")
    except DownloadError as e:
        print(f"asr download: error: {e}", file=sys.stderr)
        return 2
    return 0


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="turn a corpus into JSON Lines manifests (librispeech, kaldi, fsdd)")
    corpora = p.add_subparsers(dest="corpus", metavar="CORPUS", required=True)

    ls = corpora.add_parser("librispeech", help="LibriSpeech (OpenSLR 12), optionally downloading it")
    ls.add_argument("--corpus-dir", required=True, help="holds <subset>/ or LibriSpeech/<subset>/ (downloads go here)")
    ls.add_argument("--subsets", nargs="+", required=True, metavar="SUBSET",
                    help="e.g. train-clean-100 dev-clean dev-other test-clean test-other")
    ls.add_argument("--out", required=True, help="folder for <subset>.jsonl")
    ls.add_argument("--download", action="store_true", help="fetch missing subsets (resumable, MD5-checked)")
    ls.add_argument("--mirror", default=None, help="base URL holding <subset>.tar.gz (default: openslr.org)")
    ls.add_argument("--keep-archives", action="store_true", help="keep the .tar.gz files after extraction")
    ls.add_argument("--strict", action="store_true", help="audio without transcript (or vice versa) is an error")
    ls.add_argument("--num-workers", type=int, default=8, help="threads reading audio headers")

    kd = corpora.add_parser("kaldi", help="a Kaldi/ESPnet data directory (wav.scp, text, [segments], [utt2spk])")
    kd.add_argument("--data-dir", required=True)
    kd.add_argument("--out", required=True, help="the manifest file to write")
    kd.add_argument("--strict", action="store_true", help="utterances missing audio or text are an error")
    kd.add_argument("--num-workers", type=int, default=8, help="threads reading audio headers")

    fs = corpora.add_parser("fsdd", help="Free Spoken Digit Dataset: isolated and connected digits")
    fs.add_argument("--corpus-dir", required=True, help="holds recordings/ (or */recordings/); downloads go here")
    fs.add_argument("--out", required=True, help="folder for the manifests and the connected-digit wavs")
    fs.add_argument("--download", action="store_true",
                    help="fetch FSDD's pinned upstream commit (SHA-256-checked) when no recordings are found")
    fs.add_argument("--seed", type=int, default=0)
    fs.add_argument("--dev-speakers", nargs="*", default=None, metavar="SPEAKER",
                    help="speakers held out for dev (all takes); default none")
    fs.add_argument("--test-speakers", nargs="+", default=None, metavar="SPEAKER",
                    help="speakers held out for test (all takes); default the last speaker in sorted order")
    fs.add_argument("--num-train", type=int, default=2000, help="connected-digit training utterances")
    fs.add_argument("--num-dev", type=int, default=200)
    fs.add_argument("--num-test", type=int, default=300)
    fs.add_argument("--train-gain-db", type=float, nargs=2, default=(-18.0, 6.0), metavar=("LOW", "HIGH"),
                    help="random gain per training utterance (0 0 disables)")
    fs.add_argument("--take-gain-db", type=float, default=3.0, help="random +- gain per take in training (0 disables)")
    fs.add_argument("--trim-prob", type=float, default=0.5,
                    help="share of training takes whose weak edges are cut, as FSDD's trimming does (0 disables)")
    fs.add_argument("--trim-db", type=float, nargs=2, default=(-25.0, -10.0), metavar=("LOW", "HIGH"),
                    help="the cut's threshold below the take's loudest 10 ms, drawn per take")


def run_prepare(args: argparse.Namespace) -> int:
    from .data.download import DownloadError

    try:
        if args.corpus == "librispeech":
            from .data.librispeech import OPENSLR_URL, download_librispeech, prepare_librispeech

            if args.download:
                download_librispeech(args.corpus_dir, args.subsets, args.mirror or OPENSLR_URL,
                                     keep_archives=args.keep_archives)
            reports = prepare_librispeech(args.corpus_dir, args.subsets, args.out, strict=args.strict,
                                          num_workers=args.num_workers)
            for name, r in reports.items():
                print(f"{args.out}/{name}.jsonl: {len(r.records)} utterances, {r.hours:.2f} h; "
                      f"{len(r.text_without_audio)} transcript lines without audio, {len(r.audio_without_text)} "
                      f"audio files without transcript, {len(r.unreadable)} unreadable")
        elif args.corpus == "kaldi":
            from .data.kaldi import prepare_kaldi

            r = prepare_kaldi(args.data_dir, args.out, strict=args.strict, num_workers=args.num_workers)
            print(f"{args.out}: {len(r.records)} utterances; {len(r.text_without_audio)} without audio, "
                  f"{len(r.audio_without_text)} without text, {len(r.unreadable)} unreadable")
        else:
            from .data.fsdd import FsddOptions, download_fsdd, prepare_fsdd

            if args.download:
                download_fsdd(args.corpus_dir)
            opts = FsddOptions(seed=args.seed, num_train=args.num_train, num_dev=args.num_dev,
                               num_test=args.num_test, train_gain_db=tuple(args.train_gain_db),
                               take_gain_db=args.take_gain_db, trim_prob=args.trim_prob,
                               trim_db=tuple(args.trim_db))
            counts = prepare_fsdd(args.corpus_dir, args.out, dev_speakers=args.dev_speakers,
                                  test_speakers=args.test_speakers, options=opts)
            for name, n in counts.items():
                print(f"{args.out}/{name}.jsonl: {n} utterances")
    except DownloadError as e:
        print(f"asr prepare: error: {e}", file=sys.stderr)
        return 2
    return 0


def add_tokenizer(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tokenizer", help="train the SentencePiece tokenizer on a manifest's transcripts")
    p.add_argument("--manifest", required=True, action="append", help="training manifest (repeatable)")
    p.add_argument("--vocab-size", type=int, default=None,
                   help="ids in all, specials included (required for unigram/bpe; char: derived from the text)")
    p.add_argument("--model-type", choices=("unigram", "bpe", "char"), default="unigram")
    p.add_argument("--out", required=True, help="folder for tokenizer.model and tokenizer.vocab")
    p.add_argument("--normalizer", default="librispeech", help="text normaliser (see asr.text.NORMALIZERS)")


def run_tokenizer(args: argparse.Namespace) -> int:
    from .data.manifest import read_manifest
    from .text import Tokenizer, normalize

    texts = [normalize(r["text"], args.normalizer) for m in args.manifest for r in read_manifest(m, check_audio=False)]
    tok = Tokenizer.train(texts, args.out, args.vocab_size, args.model_type)
    print(f"{tok.model_path}: {args.model_type}, {tok.vocab_size} ids (0 <blank>, 1 <unk>, "
          f"{tok.eos_id} <sos/eos>), trained on {len(texts)} transcripts")
    return 0


def add_cmvn(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cmvn", help="global CMVN statistics of a manifest's fbank features")
    p.add_argument("--manifest", required=True)
    p.add_argument("--out", required=True, help="JSON file to write (e.g. cmvn.json)")
    p.add_argument("--num-workers", type=int, default=2, help="processes computing features")
    p.add_argument("--config", help="take sample_rate and num_mel_bins from this experiment's data section")


def run_cmvn(args: argparse.Namespace) -> int:
    from .config import DataConfig, load_config
    from .data.cmvn import compute_cmvn_stats
    from .data.manifest import read_manifest

    data_cfg = load_config(args.config).data if args.config else DataConfig()
    records = read_manifest(args.manifest)
    stats, unreadable = compute_cmvn_stats(records, data_cfg, num_workers=args.num_workers)
    stats.save(args.out)
    print(f"{args.out}: {stats.count} frames of {len(records) - len(unreadable)} utterances "
          f"({len(unreadable)} unreadable, skipped)")
    return 0


def add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model into exp/NAME (several processes: torchrun --nproc-per-node N -m asr train ...)",
    )
    p.add_argument("--config", required=True, help="experiment YAML (model, data, train, decode sections)")
    p.add_argument("--out", required=True, help="experiment directory; it becomes a model directory")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="e.g. train.lr=0.001"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="insist on continuing from the newest checkpoint (an existing --out is always continued)",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")


def run_train(args: argparse.Namespace) -> int:
    import os
    import signal

    from .config import load_config
    from .train import TrainingAborted, train

    rank = int(os.environ.get("RANK", "0"))
    if rank > 0:
        logging.getLogger().setLevel(logging.WARNING)  # rank 0 speaks for everyone
    cfg = load_config(args.config, args.overrides)
    try:
        summary = train(cfg, args.out, resume=args.resume, device=args.device)
    except TrainingAborted as e:
        print(f"asr train: aborted: {e}", file=sys.stderr)
        return 1
    stopped = summary["stopped_by"]
    if rank == 0 and stopped:
        print(f"stopped by {stopped} at step {summary['step']}: checkpoint saved; run the same command to continue")
    elif rank == 0:
        metrics = " ".join(f"{k}={summary[k]:.4g}" for k in ("dev_loss", "dev_acc", "dev_wer") if k in summary)
        print(f"done: {summary['epoch']} epochs, {summary['step']} steps {metrics}; model directory {args.out}")
    return 128 + int(getattr(signal, stopped)) if stopped else 0


def add_average(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("average", help="average the best or last N checkpoints of a run into a model directory")
    p.add_argument("--exp", required=True, help="experiment directory of `asr train`")
    p.add_argument("--num", type=int, default=10, help="number of checkpoints to average")
    p.add_argument("--by", choices=["best", "last"], default="best", help="best by train.best_metric, or newest")
    p.add_argument("--out", required=True, help="model directory to write")


def run_average(args: argparse.Namespace) -> int:
    from .checkpoint import average_checkpoints

    out, used = average_checkpoints(args.exp, args.num, args.by, args.out)
    print(f"averaged {len(used)} checkpoints ({', '.join(p.name for p in used)}) into {out}")
    return 0


def add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="PNG of a run's loss, accuracy, WER and learning rate (needs matplotlib)")
    p.add_argument("--exp", required=True, help="experiment directory of `asr train`")
    p.add_argument("--out", help="PNG path (default: EXP/train.png)")


def run_plot(args: argparse.Namespace) -> int:
    from .plot import plot_run

    try:
        path = plot_run(args.exp, args.out)
    except ImportError as e:
        print(f"asr plot: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _decode_settings(args: argparse.Namespace, base):
    """The model's decode section with the command-line overrides applied."""
    keys = ("mode", "beam_size", "ctc_weight", "length_bonus", "max_frames", "precision")
    return base.updated(**{k: getattr(args, k, None) for k in keys})


def _add_search_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model directory (config.yaml, tokenizer.model, model.pt)")
    p.add_argument("--mode", choices=["attention", "ctc_greedy", "ctc_beam", "rescore"], help="default: model config")
    p.add_argument("--beam-size", type=int, help="default: the model config's decode.beam_size")
    p.add_argument("--ctc-weight", type=float, help="weight of CTC prefix scores (default: model config)")
    p.add_argument("--length-bonus", "--length-penalty", dest="length_bonus", type=float,
                   help="added to the score per output token (default: model config; --length-penalty: old name)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"],
                   help="default: the model config's decode.precision (fp32); auto: bf16 only on hardware with "
                        "native bf16 (GPUs, CPUs with AMX or AVX512-BF16)")


def add_decode(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decode", help="decode a manifest into hypotheses (JSON Lines: id, text, score)")
    _add_search_args(p)
    p.add_argument("--manifest", required=True, help="manifest (JSON Lines) to decode")
    p.add_argument("--out", required=True, help="hypotheses to write (JSON Lines)")
    p.add_argument("--max-frames", type=int, help="fbank frames per batch, padding included (default: model config)")
    p.add_argument("--batch-size", type=int, default=64, help="at most this many utterances per batch")
    p.add_argument("--num-workers", type=int, default=2, help="feature extraction processes")


def run_decode(args: argparse.Namespace) -> int:
    from .checkpoint import load_model
    from .data.manifest import read_manifest
    from .decode_manifest import decode_manifest

    rec = load_model(args.model, args.device)
    cfg = _decode_settings(args, rec.config.decode)
    records = read_manifest(args.manifest)
    stats = decode_manifest(rec, records, args.out, cfg, args.max_frames, args.batch_size, args.num_workers)
    _write_decode_settings(args, cfg, stats)
    print(
        f"decoded {stats.decoded} utterances ({stats.audio_seconds / 3600:.2f} h) in {stats.wall_seconds:.1f} s: "
        f"RTF {stats.rtf:.4f} (mode {cfg.mode}, beam {cfg.beam_size}, ctc_weight {cfg.ctc_weight}) -> {args.out}"
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
    from pathlib import Path

    import torch

    record = {
        "model": str(Path(args.model).resolve()),
        "manifest": str(Path(args.manifest).resolve()),
        "decode": dataclasses.asdict(cfg),
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
    from pathlib import Path

    from .audio import AudioError
    from .checkpoint import load_model
    from .transcribe import Transcriber, to_json, to_srt, to_vtt

    rec = load_model(args.model, args.device)
    tr = Transcriber(rec, _decode_settings(args, rec.config.decode), window=args.window, batch_size=args.batch_size)
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
    p.add_argument("--normalizer", default="librispeech", help="text normaliser for both sides ('none': as is)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% interval")


def run_score(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from .scoring import read_transcripts, score

    res = score(read_transcripts(args.ref), read_transcripts(args.hyp), args.normalizer, args.bootstrap)
    if args.report:
        Path(args.report).write_text(res.report(), encoding="utf-8")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res.to_dict()) + "\n", encoding="utf-8")
    print(json.dumps(res.to_dict()) if args.json else res.summary())
    return 0


COMMANDS = [
    ("info", add_info, run_info),
    ("download", add_download, run_download),
    ("prepare", add_prepare, run_prepare),
    ("tokenizer", add_tokenizer, run_tokenizer),
    ("cmvn", add_cmvn, run_cmvn),
    ("train", add_train, run_train),
    ("average", add_average, run_average),
    ("plot", add_plot, run_plot),
    ("decode", add_decode, run_decode),
    ("transcribe", add_transcribe, run_transcribe),
    ("score", add_score, run_score),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asr", description="Speech recognition: prepare, train, decode, score.")
    parser.add_argument("--version", action="version", version=f"asr {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for _, add, _ in COMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    run = {name: fn for name, _, fn in COMMANDS}[args.command]
    try:
        return int(run(args) or 0)
    except (ValueError, FileNotFoundError) as e:  # config, audio and data errors carry their own context
        print(f"asr {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `asr score ... | head -1`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
