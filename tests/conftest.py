"""Shared fixtures. Real speech comes from ../shared/data (or $ASR_TEST_DATA), never from the repo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def find_data_root() -> Path | None:
    env = os.environ.get("ASR_TEST_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for c in candidates:
        if (c / "LibriSpeech").is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The folder of real speech (LibriSpeech/, fsdd/, an4_sample/, ljspeech_sample/)."""
    root = find_data_root()
    if root is None:
        why = "real speech not found: set ASR_TEST_DATA or place shared/data beside the repository"
        if os.environ.get("ASR_REQUIRE_TEST_DATA") == "1":  # CI: a missing corpus fails, it is not a skip
            pytest.fail(f"{why} (ASR_REQUIRE_TEST_DATA=1)", pytrace=False)
        pytest.skip(why)
    return root


@pytest.fixture(scope="session")
def corpus(data_root, tmp_path_factory) -> dict[str, Path]:
    """Manifests of the 20 shortest LibriSpeech utterances (and the 8 shortest) + a char tokenizer."""
    from asr.corpora.librispeech import prepare_librispeech
    from asr.data.manifest import read_manifest, write_manifest
    from asr.text import Tokenizer, normalize

    d = tmp_path_factory.mktemp("corpus")
    prepare_librispeech(data_root / "LibriSpeech", ["dev-clean", "test-clean", "test-other"], d)
    recs = sorted(
        (r for s in ("dev-clean", "test-clean", "test-other") for r in read_manifest(d / f"{s}.jsonl")),
        key=lambda r: (r["duration"], r["id"]),
    )
    write_manifest(d / "mem20.jsonl", recs[:20])
    write_manifest(d / "short8.jsonl", recs[:8])
    write_manifest(d / "short4.jsonl", recs[:4])
    Tokenizer.train([normalize(r["text"]) for r in recs[:20]], d / "tok", None, "char")
    return {
        "dir": d,
        "mem20": d / "mem20.jsonl",
        "short8": d / "short8.jsonl",
        "short4": d / "short4.jsonl",
        "tok": d / "tok",
    }


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield
