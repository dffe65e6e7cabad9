"""fp32 CPU products outside autograd with the weight kept in MKL's packed layout (``cblas_sgemm_pack``).

MKL's ``sgemm`` copies the weight into its own packed layout on every call. For a decoder step's
few rows (one utterance's 10 hypotheses: a 10 x 256 x 2048 product whose 2 MB weight is streamed
from memory) that copy is a large part of the call. PyTorch exposes MKL's packed product as
``torch.ops.mkl._mkl_linear(x, packed, weight, bias, rows)``; it runs the packed product only for
the row count the weight was packed for (any other count falls back to the plain product inside
the op). So :func:`linear` packs a weight for a row count when two calls in a row came with it: a
decoder step's rows repeat every step and are packed at the second; an encoder's rows change with
each batch's length and mostly are not. A weight keeps one packed copy (about its own size in
memory), made again when its rows change for two calls, or when the weight changes (its storage
or version counter: an optimizer step, ``load_state_dict``). Single rows (greedy search of one
utterance) take ``F.linear``, whose matrix-vector product was faster.

Measured on an Intel Xeon (AVX-512, AMX), 2 threads, the 100 h model, beam 10 with CTC
(``tools/bench_paths.py --models decode --paths mkl_packed_inference --reps 7``, alternating in
one process): 4 x 10 s one utterance at a time 1.05x faster at the full ISA and 1.09x limited to
AVX2, 8 x 10 s batched 1.03x and 0.99x (there the step is bound by memory: its keys, values and
weights), FSDD's 64 x 0.6 s 0.99x and 1.00x (five steps: the packing barely pays back). Values
equal ``F.linear``'s to float32 rounding (tested). Where a product goes to oneDNN instead
(``asr.model.fast.onednn_linear``) this path does not see it.
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

from asr import speed

__all__ = ["linear", "available"]

try:
    _packed_mm = torch.ops.mkl._mkl_linear  # (x, packed, weight (out, in), bias, rows) -> x weight^T + b
    _pack = torch.ops.mkl._mkl_reorder_linear_weight  # (weight, rows) -> the weight in MKL's packed layout
    _AVAILABLE = torch.backends.mkl.is_available()
except (AttributeError, RuntimeError):
    _packed_mm = _pack = None
    _AVAILABLE = False

# id(weight) -> (weak reference to the weight, (storage, version), rows of its last call, (rows, packed) or None);
# a plain dict (torch's WeakIdKeyDictionary costs a microsecond a lookup, 37 lookups a decoder step)
_cache: dict[int, tuple] = {}


def available() -> bool:
    return _AVAILABLE


def _packed_for(weight: torch.Tensor, rows: int) -> torch.Tensor | None:
    """The packed copy of ``weight`` for ``rows`` rows, or None (this call takes the plain product)."""
    key = (weight.data_ptr(), weight._version)
    hit = _cache.get(id(weight))
    if hit is None or hit[0]() is not weight or hit[1] != key:  # new or changed: pack at the next call
        wid = id(weight)
        _cache[wid] = (weakref.ref(weight, lambda _, wid=wid: _cache.pop(wid, None)), key, rows, None)
        return None
    ref, _, last, packed = hit
    if last == rows and (packed is None or packed[0] != rows):  # the second call in a row with these rows
        packed = (rows, _pack(weight.detach(), rows))
    _cache[id(weight)] = (ref, key, rows, packed)  # these rows are now the last call's
    return packed[1] if packed is not None and packed[0] == rows else None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; outside autograd, fp32 CPU products of at least 2 rows with the
    weight packed once for their row count (speed path ``mkl_packed_inference``)."""
    if (
        not _AVAILABLE
        or x.dtype != torch.float32
        or x.device.type != "cpu"
        or weight.dtype != torch.float32
        or weight.dim() != 2
        or (bias is not None and bias.dtype != torch.float32)
        or weight.is_inference()  # no version counter to tell when it changes
        or (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)))
        or torch.is_autocast_enabled("cpu")
        or not speed.enabled("mkl_packed_inference")
    ):
        return F.linear(x, weight, bias)
    rows = x.numel() // x.shape[-1]
    packed = _packed_for(weight, rows) if rows > 1 and weight.is_contiguous() else None
    if packed is None:
        return F.linear(x, weight, bias)
    return _packed_mm(x, packed, weight, bias, rows)
