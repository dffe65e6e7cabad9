"""Which of our CPU speed paths run: decided here, in one place, from what this CPU is.

Each path computes what its plain PyTorch reference computes (equivalence tests in
``tests/test_perf_equivalence.py``) and is used only where ``tools/bench_paths.py`` measured it
faster than that reference on that kind of CPU. ``asr.hardware.cpu_info`` says which kind.

    path                  what                                              where it runs by default
    onednn_linear         fp32 Linear products in oneDNN instead of MKL,    AMD CPUs with AVX-512 kernels
                          when autograd records them (training)
    onednn_inference      the same for products outside autograd            AMD CPUs
                          (decoding, validation), weights packed once
    onednn_big_inference  only those of at least 1024 rows (the encoder of  Intel CPUs
                          a batch), and the FFN's ReLU in its first product
    mkl_packed_inference  the other products outside autograd (a decoder    Intel CPUs
                          step's rows) in MKL, the weight packed once for
                          their row count
    conv_channels_last    Conv2d frontend channels-last, written backward   every CPU
    conv_patch_gemm       its convolutions outside autograd in chunks of    every CPU
                          output frames, as oneDNN products over patches    (wide, big convolutions only)
    conv_patch_train      in fp32 training, its second convolution and      CPUs without AVX-512
                          weight gradient as products over patches, in      kernels
                          chunks
    real_frames           in training, the encoder's FFNs (and with         every CPU
                          conv_patch_train the frontend's second
                          convolution) on real frames only
    cheap_dropout         dropout mask from 16-bit slices of random words   every CPU
    fbank_batch           batched float32 fbank with float64 fix-ups        every CPU
    heap_reuse            big blocks from glibc's heap, kept after free     every CPU (glibc only)

The last is not a kernel but a setting of the process, made once at start-up by
:func:`configure_process` (the command line and the benchmarks that time us call it). glibc
serves every block over its mmap threshold (128 KB, rising to at most 32 MB) with a fresh ``mmap``
and unmaps it on free, so each training step and each decoding batch asks the kernel for its
activations again and faults in every page of them (the zeroing shows up as slow ``copy_``s and
first writes in a profile). With ``heap_reuse`` all blocks come from the heap and freed memory
stays with the process for the next step: a training step of the 100 h model 1.62x faster on an
AMD EPYC at its full ISA and 1.17x limited to AVX2, decoding 1.00-1.03x, at 3-8% more peak
resident memory (``tools/bench_paths.py``, README Performance).

The measurements behind the table are in the README (Performance, "Speed paths"). MKL's fp32
products take a generic code path on non-Intel CPUs: on an AMD EPYC with AVX-512, oneDNN ran
the FFN's product 2.2x faster; on the same AMD limited to AVX2 and on Intel CPUs (AVX-512, or
limited to AVX2) MKL was faster for training, so the vendor and the ISA decide that path. In
decoding (no autograd) the same AMD limited to AVX2 ran 1.07-1.12x faster with oneDNN (16 x 10 s
batched and one at a time, vocabularies of 500 and 5000, alternating), hence the second path,
on every AMD CPU. Outside autograd the same AMD decoded 8 x 10 s with the 100 h model's Conv2d
frontend faster with its two convolutions in chunks of output frames (each chunk's first
convolution, then its second as one product over its 3x3 patches; no full-size intermediate)
than whole, at either ISA, and so did an Intel Xeon with AVX-512 and AMX (1.03x at its full ISA,
1.08x limited to AVX2, where its frontend took 0.55 s instead of 0.75 s for 16 x 10 s); hence
``conv_patch_gemm`` on every CPU, and only for wide, big convolutions
(asr.model.fast.conv_channels_last). In fp32 training, the same products over patches in chunks
for the second convolution (instead of oneDNN's channels-last convolution) and for its weight
gradient (instead of one product over all 3x3 windows, 350 MB for 8 x 10 s) made that Intel Xeon's
100 h training step 1.06x faster limited to AVX2 (oneDNN's convolution ran at 125 GFLOP/s there,
the products at 190) and 0.995x at its full ISA (alternating in one process); hence
``conv_patch_train`` on Intel CPUs without AVX-512 kernels (not measured on AMD: off there).
On that Intel Xeon oneDNN's products with packed weights beat MKL's on the encoder's shapes of a
batch (3984 x 256 x 2048: 1.08x; with the FFN's bias and ReLU in the product's own pass, 1.25x)
but not on a decoder step's few rows, and decoding as a whole ran 0.97x with every product in
oneDNN; with only products of at least 1024 rows there, 16 x 10 s decoded 1.03x faster at the full
ISA and limited to AVX2; hence ``onednn_big_inference`` on Intel CPUs (one utterance at a time,
249 rows, stays in MKL: 0.93x there). On that Intel Xeon the products that stay in MKL outside
autograd (a decoder step's rows) ran faster with the weight packed once in MKL's own layout than
with ``sgemm`` packing it again on every call: decoding one utterance at a time 1.05x at the full
ISA and 1.09x limited to AVX2, batched 1.03x and 0.99x, FSDD's 0.99x and 1.00x; hence
``mkl_packed_inference`` on Intel CPUs (not measured on AMD, where MKL takes its generic path: off).

``real_frames`` removes work instead of choosing a kernel: in training, the encoder's FFNs skip
a padded batch's padding (asr.model.fast.real_frames), and so does the frontend's second
convolution where it runs in chunks (``conv_patch_train``; asr.model.fast.conv_channels_last).
On that Intel Xeon, the 100 h step with 7.5% padding ran 1.03x faster at the full ISA (the FFNs)
and 1.05x limited to AVX2 (the FFNs and the convolution), FSDD's 1.01x and 1.03x; on that AMD EPYC
(the same command) 1.04x at the full ISA and 1.06-1.13x limited to AVX2, FSDD's 1.00-1.01x.

Override any of them with ``ASR_SPEED_PATHS="onednn_linear=0,cheap_dropout=1"`` (``ASR_ONEDNN_LINEAR=0``
turns the three oneDNN product paths off: every fp32 product in MKL), or in code with :func:`override`
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
    "onednn_linear", "onednn_inference", "onednn_big_inference", "mkl_packed_inference", "conv_channels_last",
    "conv_patch_gemm", "conv_patch_train", "real_frames", "cheap_dropout", "fbank_batch", "heap_reuse",
)
PROCESS_PATHS = ("heap_reuse",)  # set once per process by configure_process, not per call


def defaults(info: CpuInfo) -> dict[str, bool]:
    """The measured choice for a CPU (see the module docstring)."""
    return {
        "onednn_linear": info.vendor == "AuthenticAMD" and info.avx512_kernels,
        "onednn_inference": info.vendor == "AuthenticAMD",
        "onednn_big_inference": info.vendor == "GenuineIntel",
        "mkl_packed_inference": info.vendor == "GenuineIntel",
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
        out["onednn_linear"] = out["onednn_inference"] = out["onednn_big_inference"] = False
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
