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


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield
