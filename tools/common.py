"""What the benchmarks in tools/ share: where the repository and the shared speech are, the
LibriSpeech recordings there and their samples, the 100 h model they time, this process's memory,
the JSON line a worker process prints, a Markdown table, and the machine in one line.

A tool imports this module as ``common`` (Python puts the folder of the script it runs first on
the import path) and ``asr`` as the installed package (``pip install -e .``; tools/peers/.venv has
it installed too), never by path. Nothing here imports torch, soundfile or ``asr`` at the top, so
a tool's parent process loads only what it uses, and a child that puts another tree's ``asr``
first (``PYTHONPATH``, tools/bench_trees.py) builds that tree's model.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


# ----------------------------------------------------------------------------- shared speech
def find_data_root() -> Path | None:
    """The folder of real speech: ``$ASR_TEST_DATA``, else ``shared/data`` beside the repository, the first
    of them with a LibriSpeech/ folder; None when neither has one."""
    env = os.environ.get("ASR_TEST_DATA")
    for candidate in [*([Path(env)] if env else []), SHARED_DATA]:
        if (candidate / "LibriSpeech").is_dir():
            return candidate
    return None


def data_root() -> Path:
    """``find_data_root()``, or exit saying where the speech should be."""
    root = find_data_root()
    if root is None:
        sys.exit("real speech not found: set ASR_TEST_DATA or place shared/data beside the repository")
    return root


def librispeech_flacs(root: Path) -> list[Path]:
    """Every LibriSpeech recording under ``root`` (LibriSpeech/<subset>/<speaker>/<chapter>/*.flac), sorted."""
    return sorted(root.glob("LibriSpeech/*/*/*/*.flac"))


def librispeech_utterances(root: Path) -> list[dict]:
    """Every utterance (id, path relative to root, text, samples), shortest first."""
    import soundfile as sf

    utts = []
    for trans in sorted(root.glob("LibriSpeech/*/*/*/*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(" ", 1)
            path = trans.parent / f"{uid}.flac"
            rel = str(path.relative_to(root))
            utts.append({"id": uid, "path": rel, "text": text.strip(), "samples": sf.info(str(path)).frames})
    return sorted(utts, key=lambda u: (u["samples"], u["id"]))


def read_wav(path: str | Path):
    """The samples of a 16 kHz recording as a float32 tensor (N,) in [-1, 1], read with soundfile."""
    import soundfile as sf
    import torch

    wav, sr = sf.read(str(path), dtype="float32")
    assert sr == 16000, path
    return torch.from_numpy(wav)


# ----------------------------------------------------------------------------- the work
def model_100h(frontend: str, vocab: int = 500, repo: Path = REPO):
    """The 100 h model (``repo``'s configs/librispeech/transformer_100h.yaml) with ``frontend`` and a
    vocabulary of ``vocab``, random weights drawn from torch's current seed, built by the ``asr`` that
    imports first."""
    from asr.config import load_config
    from asr.model import ASRModel

    cfg = load_config(repo / "configs" / "librispeech" / "transformer_100h.yaml").model
    cfg.vocab_size = vocab
    cfg.frontend = frontend
    return ASRModel(cfg)


# ----------------------------------------------------------------------------- measuring, reporting
def mem_mb() -> tuple[float | None, float | None]:
    """(current, peak) resident memory of this process in MB, from /proc (None where a line is missing)."""
    fields: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            fields[k] = int(v.split()[0]) / 1024
    return fields.get("VmRSS"), fields.get("VmHWM")


def json_line(stdout: str) -> dict:
    """The result a worker process printed: the last line of its ``stdout`` that is a JSON object.
    ValueError when there is none (or it does not parse)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in the output: {stdout[-300:]!r}")


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """A Markdown table under ``title``, columns padded to their widest cell."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)) + " |")


def machine() -> str:
    """The CPU as asr.hardware sees it (model, ATen capability, native bf16), cores and torch."""
    import torch

    from asr.hardware import cpu_info

    return f"{cpu_info().summary()}, {os.cpu_count()} cores, torch {torch.__version__}"
