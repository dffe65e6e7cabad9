"""Which of our CPU speed paths run: decided here, in one place, from what this CPU is.

Each path computes what its plain PyTorch reference computes (equivalence tests in
``tests/test_perf_equivalence.py``) and is used only where ``tools/bench_paths.py`` measured it
faster than that reference on that kind of CPU. ``asr.hardware.cpu_info`` says which kind.

    path                  what                                              where it runs by default
    onednn_linear         fp32 Linear products in oneDNN instead of MKL     AMD CPUs with AVX-512 kernels
    conv_channels_last    Conv2d frontend channels-last, written backward   every CPU
    cheap_dropout         dropout mask from 16-bit slices of random words   every CPU
    fbank_batch           batched float32 fbank with float64 fix-ups        every CPU

The measurements behind the table are in the README (Performance, "Speed paths"). MKL's fp32
products take a generic code path on non-Intel CPUs: on an AMD EPYC with AVX-512, oneDNN ran
the FFN's product 2.2x faster; on the same AMD limited to AVX2 and on Intel CPUs (AVX-512, or
limited to AVX2) MKL was faster, so the vendor decides that one path.

Override any of them with ``ASR_SPEED_PATHS="onednn_linear=0,cheap_dropout=1"`` (``ASR_ONEDNN_LINEAR=0``
still turns the first off), or in code with :func:`override` (benchmarks and tests).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

from .hardware import CpuInfo, cpu_info

__all__ = ["PATHS", "enabled", "defaults", "active", "override"]

PATHS = ("onednn_linear", "conv_channels_last", "cheap_dropout", "fbank_batch")


def defaults(info: CpuInfo) -> dict[str, bool]:
    """The measured choice for a CPU (see the module docstring)."""
    return {
        "onednn_linear": info.vendor == "AuthenticAMD" and info.avx512_kernels,
        "conv_channels_last": True,
        "cheap_dropout": True,
        "fbank_batch": True,
    }


def _from_env() -> dict[str, bool]:
    out: dict[str, bool] = {}
    if os.environ.get("ASR_ONEDNN_LINEAR") == "0":
        out["onednn_linear"] = False
    spec = os.environ.get("ASR_SPEED_PATHS", "").strip()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, value = item.partition("=")
        if name not in PATHS or value not in ("0", "1"):
            raise ValueError(f"ASR_SPEED_PATHS: expected NAME=0|1 with NAME in {', '.join(PATHS)}, got {item!r}")
        out[name] = value == "1"
    return out


@functools.lru_cache(maxsize=1)
def _chosen() -> dict[str, bool]:
    return {**defaults(cpu_info()), **_from_env()}


_overrides: dict[str, bool] = {}


def enabled(name: str) -> bool:
    """Whether speed path ``name`` runs in this process."""
    if name in _overrides:
        return _overrides[name]
    return _chosen()[name]


def active() -> dict[str, bool]:
    """Every path and whether it runs (for logs and benchmark tables)."""
    return {name: enabled(name) for name in PATHS}


@contextlib.contextmanager
def override(**paths: bool) -> Iterator[None]:
    """Turn paths on or off inside a ``with`` block: ``with override(onednn_linear=False): ...``."""
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise ValueError(f"unknown speed path(s) {sorted(unknown)}; known: {', '.join(PATHS)}")
    saved = dict(_overrides)
    _overrides.update(paths)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
