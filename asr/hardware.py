"""What this machine computes fast: CPU facts asked of PyTorch and oneDNN, and the precision rule.

Nothing here parses a processor's model name: native bf16 arithmetic is what the CPU reports
(AVX512-BF16 or AMX tiles, through ``torch.cpu``) *and* what oneDNN is allowed to use
(``torch.ops.mkldnn._is_mkldnn_bf16_supported`` and ``ONEDNN_MAX_CPU_ISA``). On a CPU without
it (AVX2 only) bf16 arithmetic is emulated, about 90x slower than fp32, so ``precision: auto``
picks fp32 there. The model name is read only to print it in benchmark tables.

    precision  CUDA                              CPU
    auto       bf16 where supported, else fp16   bf16 with native bf16 (AMX, AVX512-BF16), else fp32
    bf16       bf16                              bf16; a warning without native bf16 (many times slower)
    fp16       fp16 with a GradScaler            an error
    fp32       fp32                              fp32
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

__all__ = ["CpuInfo", "cpu_info", "resolve_precision", "autocast"]

log = logging.getLogger(__name__)


MKL_VENDOR_ID = "GenuineIntel"  # the CPUID vendor id of the CPUs MKL tunes its kernels for

# oneDNN ISA limits (ONEDNN_MAX_CPU_ISA) that still allow native bf16 instructions
_ONEDNN_BF16_ISAS = ("AVX512_CORE_BF16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512", "AVX10_1_512_AMX",
                     "AVX10_1_512_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2", "ALL", "DEFAULT")  # fmt: skip


@dataclass(frozen=True)
class CpuInfo:
    """What PyTorch and oneDNN report about this CPU (``model`` is for display; ``vendor`` for the one
    vendor-specific choice, :attr:`mkl_tuned`)."""

    model: str  # the processor's model name: printed, never parsed
    vendor: str  # the CPUID vendor id ("" where unknown)
    capability: str  # ATen's kernels: "DEFAULT", "AVX2", "AVX512" (ATEN_CPU_CAPABILITY can lower it)
    avx512: bool
    avx512_bf16: bool  # the CPU has the instructions...
    amx: bool
    onednn_bf16: bool  # ...and oneDNN may use its bf16 kernels (ONEDNN_MAX_CPU_ISA can forbid them)
    onednn_max_isa: str  # ONEDNN_MAX_CPU_ISA as set, "" when unset
    threads: int

    @property
    def native_bf16(self) -> bool:
        """bf16 arithmetic in hardware, usable by oneDNN: bf16 is then faster than fp32, not 90x slower."""
        isa_ok = not self.onednn_max_isa or self.onednn_max_isa.upper() in _ONEDNN_BF16_ISAS
        return (self.avx512_bf16 or self.amx) and self.onednn_bf16 and isa_ok

    @property
    def mkl_tuned(self) -> bool:
        """MKL runs its tuned fp32 kernels here: it dispatches them by the CPUID vendor id alone, and
        on any other vendor's CPU takes a generic code path (asr.model.fast.onednn_linear)."""
        return self.vendor == MKL_VENDOR_ID

    @property
    def avx512_kernels(self) -> bool:
        """ATen and oneDNN both run AVX-512 code (neither was limited to AVX2)."""
        isa = self.onednn_max_isa.upper()
        return self.capability.startswith("AVX512") and not isa.startswith(("SSE", "AVX2", "AVX_"))

    def summary(self) -> str:
        """One line for logs and benchmark tables."""
        bf16 = "native bf16 (" + "+".join(n for n, on in (("AMX", self.amx), ("AVX512-BF16", self.avx512_bf16)) if on)
        bf16 = bf16 + ")" if self.native_bf16 else "no native bf16 (bf16 emulated: fp32 is faster)"
        limits = f", ONEDNN_MAX_CPU_ISA={self.onednn_max_isa}" if self.onednn_max_isa else ""
        return f"{self.model or 'unknown CPU'}, {self.threads} threads, ATen {self.capability}{limits}, {bf16}"

    def to_dict(self) -> dict:
        return {**asdict(self), "native_bf16": self.native_bf16}


def _cpuinfo_field(name: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return ""


def _query(fn_name: str) -> bool:
    fn = getattr(torch.cpu, fn_name, None)
    try:
        return bool(fn()) if fn is not None else False
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=1)
def cpu_info() -> CpuInfo:
    """This CPU as PyTorch and oneDNN see it (cached: the answers do not change within a process)."""
    try:
        onednn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        onednn_bf16 = False
    return CpuInfo(
        model=_cpuinfo_field("model name") or platform.processor(),
        vendor=_cpuinfo_field("vendor_id"),
        capability=torch.backends.cpu.get_cpu_capability(),
        avx512=_query("_is_avx512_supported"),
        avx512_bf16=_query("_is_avx512_bf16_supported"),
        amx=_query("_is_amx_tile_supported"),
        onednn_bf16=onednn_bf16,
        onednn_max_isa=os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "")),
        threads=torch.get_num_threads(),
    )


_warned: set[tuple[str, ...]] = set()  # (key, what) said once per process: decoding resolves per batch


def resolve_precision(precision: str, device: torch.device | str, key: str = "train.precision") -> str:
    """The precision to run: ``auto`` resolved for ``device`` (table above), logged with the reason.

    ``key`` names the setting in messages (``train.precision``, ``--precision``)."""
    from asr.config import PRECISIONS, ConfigError

    device = torch.device(device)
    if precision not in PRECISIONS:
        raise ConfigError(f"{key}: expected one of {', '.join(map(repr, PRECISIONS))}, got {precision!r}")
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported()
        chosen = precision if precision != "auto" else ("bf16" if bf16 else "fp16")
        why = "this GPU supports bf16" if bf16 else "this GPU has no bf16: fp16 with a GradScaler"
    elif device.type == "cpu":
        if precision == "fp16":
            raise ConfigError(f"{key}: fp16 needs a CUDA GPU; use auto, bf16 or fp32 on CPU")
        info = cpu_info()
        chosen = precision if precision != "auto" else ("bf16" if info.native_bf16 else "fp32")
        why = info.summary()
        if chosen == "bf16" and not info.native_bf16 and (key, "slow bf16") not in _warned:
            _warned.add((key, "slow bf16"))
            log.warning(
                "%s: bf16 on a CPU without native bf16 arithmetic (%s): it runs, but many times slower "
                "than fp32 (about 90x for a matrix product); use auto or fp32", key, why,
            )
    else:
        chosen = precision if precision in ("bf16", "fp16") else "fp32"
        why = f"device {device.type}"
    if precision == "auto" and (key, device.type, chosen) not in _warned:
        _warned.add((key, device.type, chosen))
        log.info("%s auto -> %s on %s (%s)", key, chosen, device.type, why)
    return chosen


def autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """Autocast for a resolved precision (``fp32``: nothing)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)
