"""Which of our CPU speed paths run: decided here, in one place, from what this CPU is.

Each path computes what its plain PyTorch reference computes (equivalence tests in
``tests/test_perf_equivalence.py`` and ``tests/test_fbank_batch.py``) and is on by default only on
the kinds of CPU where ``tools/bench_paths.py`` measured it faster than that reference (the table
is in docs/performance.md). ``asr.hardware.cpu_info`` says which kind this one is.

    path                  what                                              where it runs by default
    onednn_linear         fp32 Linear products in oneDNN instead of MKL,    CPUs where MKL takes its generic
                          when autograd records them (training)             path, with AVX-512 kernels
    onednn_inference      the same outside autograd (decoding,              CPUs where MKL takes its generic
                          validation), weights packed once                  path
    conv_channels_last    Conv2d frontend channels-last, written backward   every CPU
    conv_patch_gemm       its convolutions outside autograd in chunks of    every CPU
                          output frames, as oneDNN products over patches    (wide, big convolutions only)
    conv_patch_train      in fp32 training, its second convolution and      CPUs without AVX-512 kernels
                          weight gradient as products over patches, in
                          chunks
    real_frames           in training, the encoder's FFNs (and with         every CPU
                          conv_patch_train the frontend's second
                          convolution) on real frames only
    cheap_dropout         dropout masks from 16-bit slices of random        every CPU
                          words, ReLU and dropout as one step
    fbank_batch           batched float32 fbank with float64 fix-ups        every CPU
    heap_reuse            big blocks from glibc's heap, kept after free     every CPU (glibc only)

The last is not a kernel but a setting of the process, made once at start-up by
:func:`configure_process` (the command line and the benchmarks that time us call it). glibc
serves every block over its mmap threshold (128 KB, rising to at most 32 MB) with a fresh ``mmap``
and unmaps it on free, so each training step and each decoding batch would ask the kernel for its
activations again and fault in every page of them. With ``heap_reuse`` all blocks come from the
heap and freed memory stays with the process for the next step, at a few percent more peak
resident memory.

MKL runs its tuned fp32 kernels only on one vendor's CPUs (``CpuInfo.mkl_tuned``); elsewhere it
takes a generic code path that oneDNN's fp32 products beat, hence the two oneDNN paths there.

Override any of them with ``ASR_SPEED_PATHS="onednn_linear=0,cheap_dropout=1"`` (``ASR_ONEDNN_LINEAR=0``
turns both oneDNN product paths off: every fp32 product in MKL), or in code with :func:`override`
(benchmarks and tests).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
from collections.abc import Iterator

from asr.hardware import CpuInfo, cpu_info

log = logging.getLogger(__name__)

__all__ = ["PATHS", "enabled", "defaults", "active", "override", "configure_process"]

PATHS = (
    "onednn_linear", "onednn_inference", "conv_channels_last", "conv_patch_gemm", "conv_patch_train", "real_frames",
    "cheap_dropout", "fbank_batch", "heap_reuse",
)
PROCESS_PATHS = ("heap_reuse",)  # set once per process by configure_process, not per call


def defaults(info: CpuInfo) -> dict[str, bool]:
    """The measured choice for a CPU (see the module docstring)."""
    return {
        "onednn_linear": not info.mkl_tuned and info.avx512_kernels,
        "onednn_inference": not info.mkl_tuned,
        "conv_channels_last": True,
        "conv_patch_gemm": True,
        "conv_patch_train": not info.avx512_kernels,
        "real_frames": True,
        "cheap_dropout": True,
        "fbank_batch": True,
        "heap_reuse": True,
    }


def _from_env() -> dict[str, bool]:
    out: dict[str, bool] = {}
    if os.environ.get("ASR_ONEDNN_LINEAR") == "0":
        out["onednn_linear"] = out["onednn_inference"] = False
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


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


def _reuse_heap() -> bool:
    """glibc: no block from mmap, and the heap's free top kept up to 2 GB; False where there is no
    glibc ``mallopt`` (macOS, musl answers 0) or it refuses."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


@functools.lru_cache(maxsize=1)
def configure_process() -> dict[str, bool]:
    """Apply the process-wide paths (``heap_reuse``) once, at start-up before the big allocations;
    returns which took effect. Safe to call again (it does nothing the second time)."""
    done = {"heap_reuse": enabled("heap_reuse") and _reuse_heap()}
    if enabled("heap_reuse") and not done["heap_reuse"]:
        log.info("speed path heap_reuse: no glibc mallopt here, the allocator keeps its defaults")
    return done
