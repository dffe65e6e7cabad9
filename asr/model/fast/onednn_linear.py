"""Linear layers whose fp32 CPU matrix products run in oneDNN instead of the BLAS (MKL).

PyTorch sends fp32 CPU matrix products to MKL's sgemm (oneDNN only gets bf16 and fp16). On AMD
processors MKL takes a generic code path: on this project's 2-core AMD EPYC (AVX-512), 218 GFLOP/s
for the FFN's (1992 x 256) x (256 x 2048) product against 490 for oneDNN's fp32 matmul, the same
product in fp32 arithmetic (no reduced-precision shortcut: errors against float64 are alike).
:func:`linear` therefore runs fp32 CPU products of at least :data:`MIN_WORK` multiply-adds
through ``torch.ops.mkldnn._linear_pointwise``, forward and backward; smaller ones (a decoder step
of one hypothesis), other dtypes and devices, and autocast regions (where PyTorch already uses
oneDNN for bf16) take ``F.linear``. Where the op is missing (a build without oneDNN) or
the path is off, everything takes ``F.linear``. Two paths of ``asr.speed`` decide, because
training and decoding measured differently: ``onednn_linear`` for products that autograd records
(training; on by default only on AMD CPUs with AVX-512 kernels: on AVX2-only AMD and on Intel
CPUs MKL was faster there) and ``onednn_inference`` for products outside autograd (decoding,
validation; on by default on every AMD CPU: limited to AVX2, decoding ran 1.07-1.12x faster in
oneDNN). On Intel CPUs only products of at least :data:`BIG_ROWS` rows outside autograd take
oneDNN (``onednn_big_inference``: a batch's encoder, 1.03x for 16 x 10 s decoded on an Intel Xeon;
a decoder step's few rows ran faster in MKL there). Measured side by side in
``tools/bench_paths.py`` and ``tools/bench.py`` (``ours-*-mkl``).

Products outside autograd take the weight in oneDNN's own blocked layout, made once by
:func:`packed_weight` and kept while the weight is unchanged; otherwise oneDNN re-lays the whole
weight out on every call, which for a decoder step of 10 hypotheses (a 10 x 256 x 2048 product)
costs about as much as the product. With packed weights, oneDNN beats MKL from
:data:`INFERENCE_MIN_WORK` multiply-adds even at 10 rows, and decoding one utterance at a time
ran 1.66x faster than with MKL at the full ISA of an AMD EPYC, 1.39x limited to AVX2 (1.30x and
1.05x before the packing; ``tools/bench_paths.py --models decode``, README Performance). A
packed product's row does not depend on how many rows share the call (tested). The kept copy
costs the weight's size again in memory. The threshold takes in a decoder step's three 10 x 256 x
256 products a layer too: in the search their weights come from memory, and there the packed
product took 56 us against MKL's 70 (the same AMD limited to AVX2, one utterance at a time);
16 x 10 s one at a time ran 1.037x faster at the full ISA, 1.006x limited to AVX2, batched
0.998x (``tools/bench_trees.py`` against 60273bc, together with the CTC scorer change before it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from asr import speed
from asr.model.fast import mkl_packed

__all__ = [
    "Linear", "linear", "linear_relu", "onednn_mm", "onednn_available", "packed_weight", "MIN_WORK",
    "INFERENCE_MIN_WORK", "BIG_ROWS",
]

MIN_WORK = 1 << 21  # rows x in x out; below it oneDNN's per-call overhead outweighs its faster kernel here
INFERENCE_MIN_WORK = 1 << 18  # the same outside autograd, whose weight is packed once (a decoder step's 10 x 256 x 256)
BIG_ROWS = 1024  # onednn_big_inference: products of at least this many rows (a batch's encoder, not a decoder step)
PACK_ROWS = 64  # the rows oneDNN is told to expect when it lays a weight out (16-1024 measured alike)

try:
    _matmul = torch.ops.mkldnn._linear_pointwise  # (x, weight (out, in), bias, "none", [], "") -> x weight^T + b
    _pack = torch.ops.mkldnn._reorder_linear_weight  # (weight, rows) -> the weight in oneDNN's layout
except (AttributeError, RuntimeError):
    _matmul = _pack = None

_packed: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> ((storage, version), packed copy)


def onednn_available() -> bool:
    return _matmul is not None and torch.backends.mkldnn.is_available()


def _mm(a: torch.Tensor, b_t: torch.Tensor, bias: torch.Tensor | None = None, post: str = "none") -> torch.Tensor:
    """a @ b_t^T (+ bias) in oneDNN; ``post="relu"``: with the ReLU in the same pass over the output."""
    return _matmul(a, b_t, bias, post, [], "")


def packed_weight(weight: torch.Tensor, matrix: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """``weight`` (out, in) in oneDNN's blocked layout for ``_linear_pointwise``, made on first use and
    kept while the weight has the same storage and version counter (an optimizer step,
    ``load_state_dict`` or any other in-place write makes a new one; writes through ``.data``
    bypass the version counter, and nothing in ``asr`` makes them). A weight without a version
    counter (made under ``torch.inference_mode``) is passed on as it is.

    ``matrix`` makes the (out, in) matrix from a weight of another shape first (a convolution's
    kernel for products over its input patches; one weight, one ``matrix``). A weight without a
    version counter is then packed on every call: its caller makes many products per call."""
    if weight.is_inference():
        return weight if matrix is None else _pack(matrix(weight).contiguous(), PACK_ROWS)
    key = (weight.data_ptr(), weight._version)
    hit = _packed.get(weight)
    if hit is None or hit[0] != key:
        w = weight.detach()
        hit = _packed[weight] = (key, _pack(w if matrix is None else matrix(w).contiguous(), PACK_ROWS))
    return hit[1]


def _recorded(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records an op on ``tensors`` (``None``s skipped), e.g. ``x weight^T + bias``."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _use_onednn(x: torch.Tensor, weight: torch.Tensor, path: str | None = None) -> bool:
    """Whether ``x weight^T`` runs in oneDNN; ``path``: the ``asr.speed`` path that decides (default:
    ``onednn_linear`` when autograd records the product, else ``onednn_inference``, or for products
    of at least BIG_ROWS rows ``onednn_big_inference``)."""
    work = x.numel() * weight.shape[0]  # rows x in x out multiply-adds
    if work < INFERENCE_MIN_WORK or _matmul is None:  # first: a decoder step's small products leave at once
        return False
    if x.device.type != "cpu" or not torch.backends.mkldnn.enabled:
        return False
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or torch.is_autocast_enabled("cpu"):
        return False
    if path is None:
        path = "onednn_linear" if _recorded(x, weight) else "onednn_inference"
    if path == "onednn_linear":
        return speed.enabled(path) and work >= MIN_WORK
    rows = x.numel() // x.shape[-1]
    return speed.enabled(path) or (rows >= BIG_ROWS and speed.enabled("onednn_big_inference"))


def onednn_mm(a: torch.Tensor, b_t: torch.Tensor) -> torch.Tensor:
    """``a @ b_t.T`` for 2-D tensors of a training step's backward (the Conv2d frontend's weight
    gradient), in oneDNN where ``onednn_linear`` puts training's products."""
    return _mm(a, b_t) if _use_onednn(a, b_t, "onednn_linear") else a @ b_t.t()


class _OneDNNLinear(torch.autograd.Function):
    """x W^T + b with all three products (forward, input gradient, weight gradient) in oneDNN."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return _mm(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])  # (N, out)
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _mm(g, weight.t()).view(x.shape)  # (N, out) x (out, in)
        if ctx.needs_input_grad[1]:
            gw = _mm(g.t(), x.reshape(-1, x.shape[-1]).t())  # (out, N) x (N, in)
        if ctx.needs_input_grad[2]:
            gb = g.sum(0)
        return gx, gw, gb


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; fp32 CPU products of at least MIN_WORK (outside autograd:
    INFERENCE_MIN_WORK) multiply-adds in oneDNN, outside autograd with the weight packed once."""
    recorded = _recorded(x, weight, bias)
    if not _use_onednn(x, weight, "onednn_linear" if recorded else "onednn_inference"):
        return F.linear(x, weight, bias) if recorded else mkl_packed.linear(x, weight, bias)
    if recorded:
        return _OneDNNLinear.apply(x, weight, bias)
    return _mm(x, packed_weight(weight), bias)


def linear_relu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.relu(F.linear(x, weight, bias))`` outside autograd; in oneDNN (where :func:`linear` would
    be) the bias and the ReLU are applied in the product's own pass over the output."""
    if _recorded(x, weight, bias):
        return F.relu(linear(x, weight, bias))
    if _use_onednn(x, weight, "onednn_inference"):
        return _mm(x, packed_weight(weight), bias, "relu")
    return mkl_packed.linear(x, weight, bias).relu_()


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) through :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
