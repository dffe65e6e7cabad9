"""Corpus preparation: LibriSpeech (incl. real downloads from a local HTTP server), Kaldi dirs, FSDD."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import shutil
import socket
import tarfile
import threading
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.cli import main
from asr.corpora.download import ChecksumError, DownloadError, FetchError, download
from asr.corpora.fsdd import (
    BUNDLED_FSDD,
    DIGIT_WORDS,
    FSDD_COMMIT,
    FSDD_URL,
    FsddOptions,
    download_fsdd,
    prepare_fsdd,
    verify_fsdd,
)
from asr.corpora.kaldi import prepare_kaldi
from asr.corpora.librispeech import PrepareError, download_librispeech, prepare_librispeech
from asr.data.manifest import read_manifest
from asr.features.audio import load_audio

# ------------------------------------------------------------------------------------- local HTTP server


class _State:
    def __init__(self, root: Path):
        self.root = root
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.cut_after: int | None = None  # the next response stops after this many body bytes
        self.ignore_range = False  # behave like a server without Range support


class _Handler(BaseHTTPRequestHandler):
    """Serves files from ``state.root`` with HTTP Range support; can cut a response off midway."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        st: _State = self.server.state  # type: ignore[attr-defined]
        rng = self.headers.get("Range")
        st.requests.append((self.path, rng))
        f = st.root / self.path.lstrip("/")
        if not f.is_file():
            self.send_error(404)
            return
        data = f.read_bytes()
        start = 0
        if rng and not st.ignore_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if st.cut_after is not None:  # announce everything, send part, hang up
            body, st.cut_after = body[: st.cut_after], None
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def http_server(tmp_path):
    state = _State(tmp_path / "served")
    state.root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.state = state
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _writable_copy(src: Path, dst: Path) -> Path:
    """Copy a folder tree (the shared data is read-only) with ordinary permissions."""
    for p in sorted(src.rglob("*")):
        q = dst / p.relative_to(src)
        if p.is_dir():
            q.mkdir(parents=True, exist_ok=True)
        else:
            q.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, q)
    return dst


def _librispeech_tarball(data_root: Path, out: Path, subset: str = "dev-clean") -> str:
    """Build ``out`` like OpenSLR's archive (LibriSpeech/<subset>/...); return its MD5."""

    def normal_modes(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.mode = 0o755 if ti.isdir() else 0o644
        return ti

    with tarfile.open(out, "w:gz") as tf:
        tf.add(data_root / "LibriSpeech" / subset, arcname=f"LibriSpeech/{subset}", filter=normal_modes)
    return hashlib.md5(out.read_bytes()).hexdigest()


def _leftovers(corpus: Path) -> list[str]:
    return sorted(p.name for p in corpus.iterdir()) if corpus.exists() else []


# ---------------------------------------------------------------------------------------------- LibriSpeech


def test_librispeech_from_shared_layout(data_root, tmp_path) -> None:
    reports = prepare_librispeech(data_root / "LibriSpeech", ["dev-clean", "test-clean", "test-other"],
                                  tmp_path, progress=False)
    assert {k: len(r.records) for k, r in reports.items()} == {"dev-clean": 3, "test-clean": 5, "test-other": 50}
    recs = read_manifest(tmp_path / "test-other.jsonl")
    assert len(recs) == 50 and len({r["speaker"] for r in recs}) == 5
    trans = {}
    for t in (data_root / "LibriSpeech" / "test-other").rglob("*.trans.txt"):
        for line in t.read_text().splitlines():
            utt, text = line.split(" ", 1)
            trans[utt] = text
    for r in recs:
        assert r["text"] == trans[r["id"]]
        assert r["speaker"] == r["id"].split("-")[0]
        assert Path(r["audio"]).name == r["id"] + ".flac"
        assert r["duration"] == pytest.approx(sf.info(r["audio"]).duration, abs=1e-4)
    # the corpus folder may also be the one above LibriSpeech/
    assert prepare_librispeech(data_root, ["dev-clean"], tmp_path / "b", progress=False)["dev-clean"].records


def test_librispeech_mismatches_are_named_counted_and_strict(data_root, tmp_path, caplog) -> None:
    corpus = _writable_copy(data_root / "LibriSpeech" / "dev-clean", tmp_path / "corpus" / "dev-clean")
    chapter = corpus / "1272" / "128104"
    with open(chapter / "1272-128104.trans.txt", "a") as f:
        f.write("1272-128104-9999 A LINE WITHOUT AUDIO\n1272-128104-0043 A CORRUPT FILE\n")
    shutil.copyfile(chapter / "1272-128104-0000.flac", chapter / "1272-128104-0042.flac")  # no transcript
    (chapter / "1272-128104-0043.flac").write_bytes(b"fLaC but not really")
    with caplog.at_level(logging.WARNING):
        rep = prepare_librispeech(tmp_path / "corpus", ["dev-clean"], tmp_path / "out", progress=False)["dev-clean"]
    assert len(rep.records) == 3
    assert rep.text_without_audio == ["1272-128104-9999"]
    assert [Path(p).name for p in rep.audio_without_text] == ["1272-128104-0042.flac"]
    assert len(rep.unreadable) == 1 and "1272-128104-0043.flac" in rep.unreadable[0]
    for name in ("1272-128104-9999", "1272-128104-0042.flac", "1272-128104-0043.flac"):
        assert name in caplog.text
    assert len(read_manifest(tmp_path / "out" / "dev-clean.jsonl")) == 3
    with pytest.raises(PrepareError, match="1 transcript line.*without audio, 1 audio file.*--strict"):
        prepare_librispeech(tmp_path / "corpus", ["dev-clean"], tmp_path / "strict", strict=True, progress=False)
    assert not (tmp_path / "strict" / "dev-clean.jsonl").exists()


def test_librispeech_unknown_or_missing_subset(tmp_path) -> None:
    with pytest.raises(PrepareError, match="unknown LibriSpeech subset.*train-clean-99"):
        prepare_librispeech(tmp_path, ["train-clean-99"], tmp_path)
    with pytest.raises(PrepareError, match="dev-other: not found .* --download"):
        prepare_librispeech(tmp_path, ["dev-other"], tmp_path)


def test_download_clean_then_not_again(data_root, tmp_path, http_server) -> None:
    state, url = http_server
    md5 = _librispeech_tarball(data_root, state.root / "dev-clean.tar.gz")
    corpus = tmp_path / "corpus"
    download_librispeech(corpus, ["dev-clean"], url, md5={"dev-clean": md5}, progress=False)
    assert state.requests == [("/dev-clean.tar.gz", None)]
    assert _leftovers(corpus) == ["LibriSpeech"]  # archive removed, no temporary folders left
    rep = prepare_librispeech(corpus, ["dev-clean"], tmp_path / "data", progress=False)["dev-clean"]
    assert len(rep.records) == 3 and rep.problems == 0
    # a finished subset is not fetched again
    download_librispeech(corpus, ["dev-clean"], url, md5={"dev-clean": md5}, progress=False)
    assert len(state.requests) == 1


def test_download_cut_off_and_resumed(data_root, tmp_path, http_server) -> None:
    state, url = http_server
    md5 = _librispeech_tarball(data_root, state.root / "dev-clean.tar.gz")
    size = (state.root / "dev-clean.tar.gz").stat().st_size
    corpus = tmp_path / "corpus"
    state.cut_after = size // 2
    with pytest.raises(DownloadError, match=r"run again to resume"):
        download_librispeech(corpus, ["dev-clean"], url, md5={"dev-clean": md5}, progress=False, retries=0)
    part = corpus / "dev-clean.tar.gz.part"
    assert part.stat().st_size == size // 2
    assert not (corpus / "LibriSpeech").exists()
    download_librispeech(corpus, ["dev-clean"], url, md5={"dev-clean": md5}, progress=False, retries=0)
    assert state.requests == [("/dev-clean.tar.gz", None), ("/dev-clean.tar.gz", f"bytes={size // 2}-")]
    assert _leftovers(corpus) == ["LibriSpeech"]
    assert len(list((corpus / "LibriSpeech" / "dev-clean").rglob("*.flac"))) == 3


def test_interrupted_extraction_is_redone(data_root, tmp_path, http_server) -> None:
    state, url = http_server
    md5 = _librispeech_tarball(data_root, state.root / "dev-clean.tar.gz")
    corpus = tmp_path / "corpus"
    # the archive is complete but extraction was killed: a temporary folder, no LibriSpeech/dev-clean
    download(url + "dev-clean.tar.gz", corpus / "dev-clean.tar.gz", md5, progress=False)
    stale = corpus / "LibriSpeech" / ".dev-clean.extract-killed" / "LibriSpeech" / "dev-clean"
    stale.mkdir(parents=True)
    download_librispeech(corpus, ["dev-clean"], url, md5={"dev-clean": md5}, progress=False)
    assert len(state.requests) == 1  # the verified archive was not fetched again
    assert _leftovers(corpus) == ["LibriSpeech"] and _leftovers(corpus / "LibriSpeech") == ["dev-clean"]
    assert len(list((corpus / "LibriSpeech" / "dev-clean").rglob("*.flac"))) == 3


def test_download_resumes_within_one_call(tmp_path, http_server) -> None:
    state, url = http_server
    payload = np.random.default_rng(0).bytes(300_000)
    (state.root / "blob.bin").write_bytes(payload)
    state.cut_after = 100_000
    out = download(url + "blob.bin", tmp_path / "blob.bin", hashlib.md5(payload).hexdigest(),
                   retries=2, retry_wait=0, progress=False)
    assert out.read_bytes() == payload
    assert [r for _, r in state.requests] == [None, "bytes=100000-"]
    # a server that ignores Range gets a fresh start, not garbage + the whole file
    (tmp_path / "again.bin.part").write_bytes(b"garbage")
    state.ignore_range = True
    again = download(url + "blob.bin", tmp_path / "again.bin", hashlib.md5(payload).hexdigest(), progress=False)
    assert again.read_bytes() == payload and state.requests[-1][1] == "bytes=7-"


def test_download_md5_mismatch_extracts_nothing(data_root, tmp_path, http_server) -> None:
    state, url = http_server
    real = _librispeech_tarball(data_root, state.root / "dev-clean.tar.gz")
    corpus = tmp_path / "corpus"
    with pytest.raises(DownloadError, match=f"MD5 mismatch \\(expected {'0' * 32}, got {real}\\)"):
        download_librispeech(corpus, ["dev-clean"], url, md5={"dev-clean": "0" * 32}, progress=False)
    assert _leftovers(corpus) == []  # no archive, no .part, no LibriSpeech/, no temp folder


def test_cli_download_checks_the_published_md5(data_root, tmp_path, http_server, capsys) -> None:
    state, url = http_server
    _librispeech_tarball(data_root, state.root / "dev-clean.tar.gz")  # not OpenSLR's archive
    corpus, out = tmp_path / "corpus", tmp_path / "data"
    rc = main(["prepare", "librispeech", "--corpus-dir", str(corpus), "--subsets", "dev-clean", "--out", str(out),
               "--download", "--mirror", url])
    assert rc == 2
    err = capsys.readouterr().err
    assert "MD5 mismatch (expected 42e2234ba48799c1f50f24a7926300a1" in err
    assert _leftovers(corpus) == [] and not out.exists()


def test_cli_prepare_librispeech(data_root, tmp_path, capsys) -> None:
    rc = main(["prepare", "librispeech", "--corpus-dir", str(data_root / "LibriSpeech"),
               "--subsets", "test-clean", "--out", str(tmp_path)])
    assert rc == 0
    assert "test-clean.jsonl: 5 utterances" in capsys.readouterr().out
    assert len(read_manifest(tmp_path / "test-clean.jsonl")) == 5


# ---------------------------------------------------------------------------------------------------- Kaldi


def _kaldi_dir(d: Path, files: dict[str, str], **tables: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "wav.scp").write_text("".join(f"{k} {v}\n" for k, v in files.items()))
    for name, text in tables.items():
        (d / name).write_text(text)
    return d


def test_kaldi_import(data_root, tmp_path, monkeypatch) -> None:
    flacs = sorted((data_root / "LibriSpeech" / "test-clean").rglob("*.flac"))[:3]
    monkeypatch.chdir(flacs[2].parent)  # Kaldi paths are relative to the recipe's folder
    d = _kaldi_dir(
        tmp_path / "kd",
        {"r1": str(flacs[0]), "r2": str(flacs[1]), "r3": flacs[2].name},
        text="r1 HELLO WORLD\nr2 SECOND ONE\nr3 THIRD\n",
        utt2spk="r1 spkA\nr2 spkB\nr3 spkA\n",
    )
    rep = prepare_kaldi(d, tmp_path / "m.jsonl", progress=False)
    assert rep.problems == 0
    recs = {r["id"]: r for r in read_manifest(tmp_path / "m.jsonl")}
    assert recs["r1"]["text"] == "HELLO WORLD" and recs["r1"]["speaker"] == "spkA"
    assert recs["r3"]["audio"] == str(flacs[2])
    for k, f in zip(("r1", "r2", "r3"), flacs, strict=True):
        assert recs[k]["duration"] == pytest.approx(sf.info(str(f)).duration, abs=1e-4)
        assert "offset" not in recs[k]


def test_kaldi_segments(data_root, tmp_path) -> None:
    flac = sorted((data_root / "LibriSpeech" / "test-clean").rglob("*.flac"))[0]
    total = sf.info(str(flac)).duration
    d = _kaldi_dir(
        tmp_path / "kd", {"rec": str(flac)},
        text="u1 FIRST PART\nu2 REST\nu3 NO SEGMENT\n",
        segments="u1 rec 0.50 2.00\nu2 rec 2.00 -1\n",
    )
    rep = prepare_kaldi(d, tmp_path / "m.jsonl", progress=False)
    assert rep.text_without_audio == ["u3"]
    recs = {r["id"]: r for r in read_manifest(tmp_path / "m.jsonl")}
    assert recs["u1"]["offset"] == 0.5 and recs["u1"]["end"] == 2.0 and recs["u1"]["duration"] == 1.5
    assert recs["u2"]["offset"] == 2.0 and "end" not in recs["u2"]
    assert recs["u2"]["duration"] == pytest.approx(total - 2.0, abs=1e-4)
    wav = load_audio(recs["u1"]["audio"], 16000, recs["u1"]["offset"], recs["u1"].get("end"))
    assert wav.numel() == 24000
    with pytest.raises(PrepareError, match="--strict"):
        prepare_kaldi(d, tmp_path / "s.jsonl", strict=True, progress=False)


@pytest.mark.parametrize(
    "scp, message",
    [
        ("a /x/a.wav\nb sox /x/b.wav -t wav - |\n", r"wav\.scp:2: b is a command pipeline"),
        ("a /x/a.ark:1234\n", r"wav\.scp:1: a points into an ark archive"),
        ("a\n", r"wav\.scp:1: expected '<recording-id> <path>'"),
        ("a /x/a.wav\na /x/b.wav\n", r"wav\.scp:2: a appears twice \(first on line 1\)"),
    ],
)
def test_kaldi_bad_wav_scp(tmp_path, scp: str, message: str) -> None:
    d = tmp_path / "kd"
    d.mkdir()
    (d / "wav.scp").write_text(scp)
    (d / "text").write_text("a X\n")
    with pytest.raises(PrepareError, match=message):
        prepare_kaldi(d, tmp_path / "m.jsonl", progress=False)


def test_kaldi_missing_audio_and_bad_segments(data_root, tmp_path) -> None:
    flac = sorted((data_root / "LibriSpeech" / "test-clean").rglob("*.flac"))[0]
    d = _kaldi_dir(tmp_path / "kd", {"a": str(flac), "b": str(tmp_path / "gone.wav")}, text="a X\nb Y\nc Z\n")
    rep = prepare_kaldi(d, tmp_path / "m.jsonl", progress=False)
    assert [r["id"] for r in rep.records] == ["a"]
    assert rep.text_without_audio == ["c"] and "gone.wav: no such file" in rep.unreadable[0]
    (d / "segments").write_text("s1 nosuch 0 1\n")
    with pytest.raises(PrepareError, match=r"segments:1: recording nosuch of segment s1 is not in wav\.scp"):
        prepare_kaldi(d, tmp_path / "m.jsonl", progress=False)
    (d / "segments").write_text("s1 a 2.0 1.0\n")
    with pytest.raises(PrepareError, match=r"segments:1: segment s1 has start 2.0 and end 1.0"):
        prepare_kaldi(d, tmp_path / "m.jsonl", progress=False)
    with pytest.raises(PrepareError, match="not a Kaldi data directory"):
        prepare_kaldi(tmp_path, tmp_path / "m.jsonl")


def test_cli_prepare_kaldi_pipe_error(tmp_path, capsys) -> None:
    d = _kaldi_dir(tmp_path / "kd", {"u": "gunzip -c u.wav.gz |"}, text="u X\n")
    assert main(["prepare", "kaldi", "--data-dir", str(d), "--out", str(tmp_path / "m.jsonl")]) == 2
    assert "wav.scp:1: u is a command pipeline" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------- FSDD

SMALL = dict(num_train=12, num_dev=6, num_test=6)
FSDD = BUNDLED_FSDD  # the recordings that ship with the repository (FLAC): no ../shared/data needed


def _clip(folder: Path, take: str) -> Path:
    """The file of ``take`` (``{digit}_{speaker}_{index}``) in ``folder``, FLAC or WAV."""
    return next(p for p in (folder / f"{take}.flac", folder / f"{take}.wav") if p.is_file())


def _fsdd_checks(out: Path, clips: Path, train_spk: set[str], test_spk: set[str], lo: int = 5, hi: int = 49) -> None:
    """Check every connected-digit utterance against the clips it names (split, speaker, text, gaps)."""
    for split in ("train", "dev", "test"):
        for r in read_manifest(out / f"{split}.jsonl"):
            takes = [t.split("_") for t in r["takes"]]
            assert 1 <= len(takes) <= 7
            assert r["text"] == " ".join(DIGIT_WORDS[int(d)] for d, _, _ in takes)
            assert {s for _, s, _ in takes} == {r["speaker"]}, "one speaker per utterance"
            idx = [int(i) for _, _, i in takes]
            if split == "train":
                assert r["speaker"] in train_spk and all(lo <= i <= hi for i in idx)
            elif split == "test":
                assert r["speaker"] in test_spk
            else:
                assert r["speaker"] not in test_spk
                assert r["speaker"] not in train_spk or all(not lo <= i <= hi for i in idx)
            info = sf.info(r["audio"])
            assert info.samplerate == 16000 and info.duration == pytest.approx(r["duration"], abs=1e-3)
            # takes (training takes may have weak edges cut) + gaps (50-400 ms) + edges (50-250 ms each)
            speech = sum(sf.info(str(_clip(clips, t))).duration for t in r["takes"])
            k = len(takes)
            shortest = 0.0 if split == "train" else speech
            assert shortest + 0.05 * (k - 1) + 0.1 - 0.01 <= r["duration"] <= speech + 0.4 * (k - 1) + 0.5 + 0.01


def test_fsdd_bundled_corpus(tmp_path) -> None:
    out = tmp_path / "fsdd"
    counts = prepare_fsdd(FSDD, out, options=FsddOptions(seed=3, **SMALL), progress=False)
    # 5 speakers found; the default test speaker is the last in sorted order
    assert counts == {"digits_train": 4 * 10 * 45, "train": 12, "digits_dev": 4 * 10 * 5, "dev": 6,
                      "digits_test": 500, "test": 6}
    test = read_manifest(out / "digits_test.jsonl")
    assert {r["speaker"] for r in test} == {"yweweler"}
    train = read_manifest(out / "digits_train.jsonl")
    assert {r["speaker"] for r in train} == {"george", "jackson", "lucas", "nicolas"}
    assert all(5 <= int(r["id"].rsplit("-", 1)[1]) <= 49 for r in train)
    assert Counter(r["text"] for r in train)["ZERO"] == 4 * 45
    assert all(r["audio"].endswith(".flac") for r in test)
    _fsdd_checks(out, FSDD / "recordings", {"george", "jackson", "lucas", "nicolas"}, {"yweweler"})


def test_trim_weak_edges_cuts_only_frames_below_the_threshold() -> None:
    from asr.corpora.fsdd import _trim_weak_edges

    frame = 80  # 10 ms at 8 kHz
    rng = np.random.default_rng(0)
    loud = rng.standard_normal(20 * frame).astype(np.float32)  # 0 dB
    onset = 0.1 * rng.standard_normal(5 * frame).astype(np.float32)  # -20 dB: a weak fricative
    quiet = 0.01 * rng.standard_normal(8 * frame).astype(np.float32)  # -40 dB: the noise floor
    x = np.concatenate([quiet, onset, loud, quiet])
    assert np.array_equal(_trim_weak_edges(x, -30.0), np.concatenate([onset, loud]))  # the floor goes
    assert np.array_equal(_trim_weak_edges(x, -12.0), loud)  # the weak onset goes too
    assert _trim_weak_edges(x, -60.0).size == x.size
    assert _trim_weak_edges(x[: 2 * frame], -10.0).size == 2 * frame  # too short to judge: kept


@pytest.mark.parametrize("bad", [dict(trim_prob=1.5), dict(trim_db=(-10.0, -25.0)), dict(trim_db=(-10.0, 5.0))])
def test_fsdd_trim_options_are_checked(bad) -> None:
    with pytest.raises(ValueError, match="trim_"):
        FsddOptions(**bad).validate()


def test_fsdd_trimming_only_touches_training_takes(tmp_path) -> None:
    """--trim-prob cuts weak edges of training takes only, and leaves the rest of the draw as it was."""
    durations = {}
    for prob in (0.0, 1.0):
        out = tmp_path / f"p{prob}"
        prepare_fsdd(FSDD, out, options=FsddOptions(seed=2, trim_prob=prob, **SMALL), progress=False)
        durations[prob] = {s: [(r["takes"], r["duration"]) for r in read_manifest(out / f"{s}.jsonl")]
                           for s in ("train", "dev", "test")}
    for split in ("dev", "test"):
        assert durations[0.0][split] == durations[1.0][split]
    plain, trimmed = durations[0.0]["train"], durations[1.0]["train"]
    assert [t for t, _ in plain] == [t for t, _ in trimmed]  # the same takes, in the same order
    assert sum(d for _, d in trimmed) < sum(d for _, d in plain)


def test_fsdd_deterministic_for_a_seed(tmp_path) -> None:
    opts = dict(num_train=5, num_dev=3, num_test=3)

    def run(name: str, seed: int) -> tuple[list[str], list[bytes]]:
        out = tmp_path / name
        prepare_fsdd(FSDD, out, options=FsddOptions(seed=seed, **opts), progress=False)
        lines = (out / "train.jsonl").read_text().splitlines() + (out / "test.jsonl").read_text().splitlines()
        wavs = [p.read_bytes() for p in sorted((out / "wav").rglob("*.wav"))]
        return lines, wavs

    a, b, c = run("a", 7), run("b", 7), run("c", 8)
    assert a == b  # manifests (relative paths) and audio bytes identical
    assert a[0] != c[0]
    # running again over an existing output replaces it cleanly
    prepare_fsdd(FSDD, tmp_path / "a", options=FsddOptions(seed=7, num_train=2, num_dev=1,
                 num_test=1), progress=False)
    assert len(list((tmp_path / "a" / "wav" / "train").glob("*.wav"))) == 2


def test_fsdd_speaker_options_and_discovery(tmp_path) -> None:
    src = FSDD / "recordings"
    # a corpus with other speaker names and only a few takes: nothing may assume FSDD's speaker list
    corpus = tmp_path / "corpus" / "recordings"
    corpus.mkdir(parents=True)
    for new, old in (("anna", "george"), ("bob", "jackson"), ("carl", "lucas")):
        for d in range(10):
            for t in range(8):
                shutil.copyfile(src / f"{d}_{old}_{t}.flac", corpus / f"{d}_{new}_{t}.flac")
    (corpus / "README.wav").write_bytes(b"")  # not an FSDD name: skipped with a warning
    out = tmp_path / "out"
    opts = FsddOptions(seed=1, train_takes=(2, 7), **SMALL)
    prepare_fsdd(tmp_path / "corpus", out, dev_speakers=["anna"], options=opts, progress=False)
    assert {r["speaker"] for r in read_manifest(out / "digits_test.jsonl")} == {"carl"}
    dev = read_manifest(out / "digits_dev.jsonl")
    assert {r["speaker"] for r in dev} == {"anna", "bob"}
    assert len(dev) == 80 + 20  # anna: all takes; bob: takes 0-1
    _fsdd_checks(out, corpus, {"bob"}, {"carl"}, lo=2, hi=7)
    with pytest.raises(PrepareError, match=r"--test-speakers: unknown speaker\(s\) \['george'\]; .*anna, bob, carl"):
        prepare_fsdd(tmp_path / "corpus", out, test_speakers=["george"], options=opts)
    with pytest.raises(PrepareError, match="no training speaker left"):
        prepare_fsdd(tmp_path / "corpus", out, dev_speakers=["anna", "bob"], options=opts)
    with pytest.raises(PrepareError, match="in both --dev-speakers and --test-speakers"):
        prepare_fsdd(tmp_path / "corpus", out, dev_speakers=["anna"], test_speakers=["anna"], options=opts)
    with pytest.raises(PrepareError, match="no FSDD recordings .* --download .* bundled"):
        prepare_fsdd(tmp_path / "out" / "wav", out)
    shutil.copyfile(src / "0_george_0.flac", corpus / "0_anna_0.wav")  # one take twice: which is meant?
    with pytest.raises(PrepareError, match="0_anna_0.flac and 0_anna_0.wav are the same take"):
        prepare_fsdd(tmp_path / "corpus", out, options=opts)


def _wav_bytes(flac: Path) -> bytes:
    """The 16-bit WAV FSDD published for a bundled FLAC recording (the same samples)."""
    buf = io.BytesIO()
    x, rate = sf.read(str(flac), dtype="int16")
    sf.write(buf, x, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _fsdd_archive(state, tmp_path: Path, change: str | None = None) -> tuple[Path, str]:
    """A small zip laid out like GitHub's archive of a commit (george and lucas, takes 0-5, plus theo,
    who has no checksum); the SHA-256 list of the original WAVs goes beside it. ``change``: a
    recording whose bytes in the archive differ from the list. Returns (list file, archive SHA-256)."""
    top = f"free-spoken-digit-dataset-{FSDD_COMMIT}"
    lines, buf = [], io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{top}/README.md", "FSDD")
        for spk in ("george", "lucas", "theo"):
            for d in range(10):
                for t in range(6):
                    name = f"{d}_{spk}_{t}.wav"
                    data = _wav_bytes(FSDD / "recordings" / f"{d}_{'george' if spk == 'theo' else spk}_{t}.flac")
                    if spk != "theo":
                        lines.append(f"{hashlib.sha256(data).hexdigest()}  recordings/{name}\n")
                    if name == change:
                        data = data[:-2] + bytes([data[-2] ^ 1, data[-1]])  # one sample, one bit
                    zf.writestr(f"{top}/recordings/{name}", data)
    (state.root / f"{FSDD_COMMIT}.zip").write_bytes(buf.getvalue())
    sums = tmp_path / "upstream-wav.sha256"
    sums.write_text("".join(lines))
    return sums, hashlib.sha256(buf.getvalue()).hexdigest()


def test_fsdd_download_pins_a_commit_and_checks_every_recording(tmp_path, http_server, caplog) -> None:
    assert FSDD_URL.endswith(f"/archive/{FSDD_COMMIT}.zip") and re.fullmatch(r"[0-9a-f]{40}", FSDD_COMMIT)
    state, url = http_server
    sums, archive_sha = _fsdd_archive(state, tmp_path)
    corpus = tmp_path / "corpus"
    with caplog.at_level(logging.INFO, logger="asr.corpora.fsdd_corpus"):
        rec = download_fsdd(corpus, url + f"{FSDD_COMMIT}.zip", archive_sha, upstream_sums=sums, progress=False)
    assert "60 recording(s) of speaker(s) without checksums (theo) left out" in caplog.text
    assert rec == corpus / "free-spoken-digit-dataset" / "recordings"
    assert len(list(rec.glob("*.wav"))) == 120 and not list(rec.glob("*theo*"))
    assert _leftovers(corpus) == ["free-spoken-digit-dataset"]  # archive removed, no temporary folders left
    assert verify_fsdd(corpus) == (rec, 120)  # the list written beside the recordings vouches for them
    assert download_fsdd(corpus, url + f"{FSDD_COMMIT}.zip", upstream_sums=sums, progress=False) == rec
    assert len(state.requests) == 1  # present: not fetched again
    out = tmp_path / "out"
    prepare_fsdd(corpus, out, options=FsddOptions(train_takes=(1, 5), **SMALL), progress=False)
    assert {r["speaker"] for r in read_manifest(out / "test.jsonl")} == {"lucas"}
    _fsdd_checks(out, rec, {"george"}, {"lucas"}, lo=1, hi=5)


def test_fsdd_download_changed_recording_is_named_and_nothing_extracted(tmp_path, http_server) -> None:
    state, url = http_server
    sums, _ = _fsdd_archive(state, tmp_path, change="7_lucas_3.wav")
    corpus = tmp_path / "corpus"
    with pytest.raises(ChecksumError, match=r"1 recording\(s\) changed or missing.*nothing was extracted(.|\n)*"
                       r"recordings/7_lucas_3.wav: SHA-256 [0-9a-f]{64}, expected [0-9a-f]{64}"):
        download_fsdd(corpus, url + f"{FSDD_COMMIT}.zip", upstream_sums=sums, progress=False)
    assert _leftovers(corpus) == []  # no recordings, no archive, no temporary folder
    # A recording the list names but the archive lacks is an error too.
    sums, _ = _fsdd_archive(state, tmp_path)  # every listed recording as listed, now
    sums.write_text(sums.read_text() + f"{'0' * 64}  recordings/3_nicolas_9.wav\n")
    with pytest.raises(ChecksumError, match="3_nicolas_9.wav: missing from the archive"):
        download_fsdd(corpus, url + f"{FSDD_COMMIT}.zip", upstream_sums=sums, progress=False)
    assert _leftovers(corpus) == []


def test_fsdd_download_archive_sha256_mismatch(tmp_path, http_server) -> None:
    state, url = http_server
    sums, _ = _fsdd_archive(state, tmp_path)
    with pytest.raises(ChecksumError, match=f"SHA-256 mismatch \\(expected {'0' * 64}, got [0-9a-f]{{64}}\\)"):
        download_fsdd(tmp_path / "corpus", url + f"{FSDD_COMMIT}.zip", "0" * 64, upstream_sums=sums, progress=False)
    assert _leftovers(tmp_path / "corpus") == []


def test_fsdd_download_offline_names_corpus_dir(tmp_path, capsys, monkeypatch) -> None:
    with socket.socket() as s:  # a port nothing listens on: what an offline machine sees
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr("asr.corpora.download.time.sleep", lambda _s: None)
    url = f"http://127.0.0.1:{port}/{FSDD_COMMIT}.zip"
    with pytest.raises(FetchError, match=r"(?s)download failed.*bundled in .*corpus/fsdd.*--corpus-dir DIR"):
        download_fsdd(tmp_path / "corpus", url, progress=False, retries=0)
    rc = main(["download", "fsdd", "--corpus-dir", str(tmp_path / "corpus"), "--url", url])
    err = capsys.readouterr().err
    assert rc == 2 and "--corpus-dir DIR" in err and "--download" in err
    assert not (tmp_path / "corpus" / "free-spoken-digit-dataset").exists()


def test_cli_prepare_fsdd(tmp_path, capsys) -> None:
    out = tmp_path / "fsdd"
    rc = main(["prepare", "fsdd", "--corpus-dir", str(FSDD), "--out", str(out), "--seed", "2",
               "--test-speakers", "george", "--dev-speakers", "lucas", "--num-train", "4", "--num-dev", "2",
               "--num-test", "2"])
    assert rc == 0
    assert "test.jsonl: 2 utterances" in capsys.readouterr().out
    assert {r["speaker"] for r in read_manifest(out / "test.jsonl")} == {"george"}
    assert {json.loads(x)["speaker"] for x in (out / "digits_dev.jsonl").read_text().splitlines()} >= {"lucas"}
