"""Corpora in, manifests, tokenizer and CMVN out: ``asr download|prepare|tokenizer|cmvn``."""

from __future__ import annotations

import argparse
import sys


def add_download(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("download", help="fetch a corpus (librispeech, librispeech-lm, fsdd); what is there is not "
                       "fetched again")
    corpora = p.add_subparsers(dest="corpus", metavar="CORPUS", required=True)
    ls = corpora.add_parser("librispeech", help="LibriSpeech subsets from OpenSLR 12 (resumable, MD5-checked)")
    ls.add_argument("--corpus-dir", required=True, help="the subsets land in CORPUS_DIR/LibriSpeech/<subset>")
    ls.add_argument("--subsets", nargs="+", required=True, metavar="SUBSET")
    ls.add_argument("--mirror", default=None, help="base URL holding <subset>.tar.gz (default: openslr.org)")
    ls.add_argument("--keep-archives", action="store_true", help="keep the .tar.gz files after extraction")
    lm = corpora.add_parser("librispeech-lm", help="the LibriSpeech LM corpus from OpenSLR 11 (librispeech-lm-norm."
                            "txt.gz, 1.5 GB; resumable, MD5-checked)")  # fmt: skip
    lm.add_argument("--corpus-dir", required=True, help="the file lands in CORPUS_DIR/librispeech-lm-norm.txt.gz")
    lm.add_argument("--mirror", default=None, help="base URL holding librispeech-lm-norm.txt.gz (default: openslr.org)")
    lm.add_argument("--md5", default=None, help="expected MD5 (default: the recorded one; OpenSLR 11 publishes none)")
    fs = corpora.add_parser("fsdd", help="the Free Spoken Digit Dataset: check CORPUS_DIR's recordings, or fetch "
                            "a pinned upstream commit (each recording SHA-256-checked before extraction)")
    fs.add_argument("--corpus-dir", required=True,
                    help="holds recordings/ (checked against its SHA256SUMS when it has one, e.g. corpus/fsdd); "
                    "a download lands in CORPUS_DIR/free-spoken-digit-dataset")
    fs.add_argument("--no-fetch", action="store_true", help="only check the recordings CORPUS_DIR holds; fetch nothing")
    fs.add_argument("--url", default=None, help="the archive to fetch (default: FSDD's pinned commit on GitHub)")
    fs.add_argument("--sha256", default=None, help="SHA-256 of the whole archive, when known")


def run_download(args: argparse.Namespace) -> int:
    from asr.corpora.download import DownloadError

    try:
        if args.corpus == "librispeech":
            from asr.corpora.librispeech import OPENSLR_URL, download_librispeech

            dirs = download_librispeech(
                args.corpus_dir, args.subsets, args.mirror or OPENSLR_URL, keep_archives=args.keep_archives
            )
            for d in dirs:
                print(d)
        elif args.corpus == "librispeech-lm":
            from asr.corpora.librispeech import OPENSLR_LM_URL, download_librispeech_lm

            print(download_librispeech_lm(args.corpus_dir, args.mirror or OPENSLR_LM_URL, md5=args.md5))
        else:
            from asr.corpora.fsdd_corpus import FSDD_URL, download_fsdd, verify_fsdd

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
    fs.add_argument("--tts-dir", default=None,
                    help="synthetic speakers' takes ({digit}_tts{NNN}_{take}.flac) for training; with --tts-voices "
                         "they are synthesised there first (espeak-ng; reused when done for the same options)")
    fs.add_argument("--tts-voices", type=int, default=0, help="synthetic speakers to synthesise into --tts-dir")
    fs.add_argument("--tts-takes", type=int, default=10, help="takes of each digit per synthetic speaker")
    fs.add_argument("--tts-share", type=float, default=0.0,
                    help="share of the training utterances spoken by a synthetic speaker (needs --tts-dir)")


def run_prepare(args: argparse.Namespace) -> int:
    from asr.corpora.download import DownloadError

    try:
        if args.corpus == "librispeech":
            from asr.corpora.librispeech import OPENSLR_URL, download_librispeech, prepare_librispeech

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
            from asr.corpora.kaldi import prepare_kaldi

            r = prepare_kaldi(args.data_dir, args.out, strict=args.strict, num_workers=args.num_workers)
            print(f"{args.out}: {len(r.records)} utterances; {len(r.text_without_audio)} without audio, "
                  f"{len(r.audio_without_text)} without text, {len(r.unreadable)} unreadable")
        else:
            from asr.corpora.fsdd import FsddOptions, check_options, download_fsdd, prepare_fsdd
            from asr.corpora.librispeech import PrepareError

            if args.download:
                download_fsdd(args.corpus_dir)
            opts = FsddOptions(seed=args.seed, num_train=args.num_train, num_dev=args.num_dev,
                               num_test=args.num_test, train_gain_db=tuple(args.train_gain_db),
                               take_gain_db=args.take_gain_db, trim_prob=args.trim_prob,
                               trim_db=tuple(args.trim_db), tts_share=args.tts_share)
            check_options(opts, args.tts_dir)  # before the voices are rendered
            if args.tts_voices > 0:
                from asr.corpora.fsdd_tts import TtsOptions, synthesize_voices

                if not args.tts_dir:
                    raise PrepareError("--tts-voices: name the folder to synthesise them into (--tts-dir)")
                synthesize_voices(args.tts_dir, TtsOptions(voices=args.tts_voices, takes=args.tts_takes))
            counts = prepare_fsdd(args.corpus_dir, args.out, dev_speakers=args.dev_speakers,
                                  test_speakers=args.test_speakers, options=opts, tts_dir=args.tts_dir)
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
    from asr.data.manifest import read_manifest
    from asr.text import Tokenizer, normalize

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
    from asr.config import DataConfig, load_config
    from asr.data.cmvn import compute_cmvn_stats
    from asr.data.manifest import read_manifest

    data_cfg = load_config(args.config).data if args.config else DataConfig()
    records = read_manifest(args.manifest)
    stats, unreadable = compute_cmvn_stats(records, data_cfg, num_workers=args.num_workers)
    stats.save(args.out)
    print(f"{args.out}: {stats.count} frames of {len(records) - len(unreadable)} utterances "
          f"({len(unreadable)} unreadable, skipped)")
    return 0


def add_pseudo_label(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pseudo-label", help="a manifest of untranscribed audio with a decoding's hypotheses as its "
                       "transcripts, to adapt a model to it (asr.data.pseudo_label)")
    p.add_argument("--manifest", required=True, help="the decoded utterances (their own text is never read)")
    p.add_argument("--hyp", required=True, help="asr decode's output for them (hyp.jsonl)")
    p.add_argument("--out", required=True, help="manifest to write")


def run_pseudo_label(args: argparse.Namespace) -> int:
    from asr.data.pseudo_label import pseudo_label

    stats = pseudo_label(args.manifest, args.hyp, args.out)
    print(f"{args.out}: {stats.written} utterances with their hypotheses as transcripts; left out: "
          f"{len(stats.no_hypothesis)} without a hypothesis, {len(stats.empty)} decoded to nothing")
    return 0
