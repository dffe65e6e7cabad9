"""Linear layers whose fp32 CPU matrix products run in oneDNN instead of the BLAS (MKL).

PyTorch sends fp32 CPU matrix products to MKL's sgemm (oneDNN only gets bf16 and fp16). On some
CPUs MKL takes a generic code path and oneDNN's fp32 matmul computes the same product (in fp32
arithmetic, no reduced-precision shortcut) much faster. :func:`linear` therefore runs fp32 CPU
products of at least :data:`MIN_WORK` multiply-adds through ``torch.ops.mkldnn._linear_pointwise``,
forward and backward; smaller ones (a decoder step of one hypothesis), other dtypes and devices,
and autocast regions (where PyTorch already uses oneDNN for bf16) take ``F.linear``. Where the op
is missing (a build without oneDNN) or the path is off, everything takes ``F.linear``. Two paths of
``asr.speed`` decide, because training and decoding measure differently: ``onednn_linear`` for
products that autograd records (training) and ``onednn_inference`` for products outside autograd
(decoding, validation). docs/performance.md has the measurements (``tools/bench_paths.py``).

Products outside autograd take the weight in oneDNN's own blocked layout, made once by
:func:`packed_weight` and kept while the weight is unchanged; otherwise oneDNN re-lays the whole
weight out on every call, which for a decoder step of 10 hypotheses (a 10 x 256 x 2048 product)
costs about as much as the product. With packed weights oneDNN is worth it from
:data:`INFERENCE_MIN_WORK` multiply-adds, a decoder step's 10 x 256 x 256 products included. A
packed product's row does not depend on how many rows share the call (tested). The kept copy
costs the weight's size again in memory.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from asr import speed

__all__ = [
    "Linear", "linear", "linear_relu", "onednn_mm", "onednn_available", "packed_weight", "MIN_WORK",
    "INFERENCE_MIN_WORK",
]

MIN_WORK = 1 << 21  # rows x in x out; below it oneDNN's per-call overhead outweighs its faster kernel
INFERENCE_MIN_WORK = 1 << 18  # the same outside autograd, whose weight is packed once (a decoder step's 10 x 256 x 256)
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
    ``onednn_linear`` when autograd records the product, else ``onednn_inference``)."""
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
    return speed.enabled(path)


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
        return F.linear(x, weight, bias)
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
    return F.linear(x, weight, bias).relu_()


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters and state dict) through :func:`linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
