"""An LM with int8 matrix products, for decoding (``decode.quantize_lm``, ``--quantize-lm``).

Shallow fusion spends most of its time in the LM's matrix products (``tools/bench_lm.py``), and
an LM tolerates coarser arithmetic than the search around it, as ESPnet's ``--quantize_lm`` and
the int8 LMs of other toolkits assume. :func:`quantize_lm` returns a copy of an LM whose every
Linear (a tied output layer included) is an :class:`Int8Linear`:

- the weight is rounded once to integers in [-64, 64] with one scale per output row;
- each input row is rounded when it arrives to integers in [-127, 127] with its own scale;
- the two are multiplied in integers (``torch._int_mm``, int32 sums) and the scales and the bias
  are applied to the int32 result in fp32.

Why 64 and not 127 for the weights: on a CPU without VNNI (AVX2 only), oneDNN multiplies int8
pairs with an instruction whose 16-bit pair sums saturate beyond 32767; with weights of magnitude
at most 64 (255 x 64 x 2 = 32640) no sum saturates, so the integer product is exact on every CPU
(``tests/test_lm_quantize.py`` checks the worst case on the CPU it runs on). Exact integers and a
scale per row make a row's result independent of the CPU's instruction set and of the other rows
in its batch: batched decoding still equals one-by-one decoding with a quantized LM.

The LM's other arithmetic (attention over its cache, LayerNorm, softmax; the LSTM's recurrence)
is unchanged. What it costs in accuracy and buys in speed is measured by ``tools/bench_lm.py``
(docs/lm.md); it is off by default, so that fusion stays equal to ESPnet's.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["Int8Linear", "quantize_lm", "WEIGHT_MAX", "INPUT_MAX"]

WEIGHT_MAX = 64  # |weight integer| <= 64: exact int8 products without VNNI (see the module's docstring)
INPUT_MAX = 127


class Int8Linear(nn.Module):
    """``F.linear(x, weight, bias)`` with weight and input rounded to int8 (one scale per weight row
    and per input row) and multiplied in integers. Inference only. The output is fp32, or
    autocast's dtype under autocast, as ``nn.Linear``'s would be (so the attention after it runs as
    it would after a Linear: a bf16 query against the fp32 KV cache takes the cache's fp32 path)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        w = weight.detach().float()
        scale = w.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / WEIGHT_MAX  # (N,)
        q = torch.round(w / scale[:, None]).to(torch.int8)  # (N, K)
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        self.register_buffer("weight_t", q.t())  # (K, N): _int_mm's right operand, a view of the rows
        self.register_buffer("weight_scale", scale)
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, device = x.shape, x.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32
        x = x.reshape(-1, self.in_features).float()
        scale = x.abs().amax(dim=1, keepdim=True)  # (M, 1): max |x| per row (vector_norm(ord=inf): 20x slower)
        scale = scale.clamp_min_(torch.finfo(torch.float32).tiny).div_(INPUT_MAX)
        q = torch.div(x, scale).round_().to(torch.int8)
        y = torch._int_mm(q, self.weight_t).float()  # (M, N), exact integer sums
        scale = scale * self.weight_scale  # (M, N) by broadcasting
        y = y.mul_(scale) if self.bias is None else torch.addcmul(self.bias, y, scale)
        return y.view(*shape[:-1], self.out_features).to(dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def quantize_lm(lm: nn.Module) -> nn.Module:
    """A copy of ``lm`` (a TransformerLM or LSTMLM, or any module) in eval mode with every
    ``nn.Linear`` replaced by an :class:`Int8Linear`, and a tied output layer (``output`` None: the
    embedding's weight) given one of its own. ``lm`` itself is left as it is."""
    out = copy.deepcopy(lm).eval()
    for module in list(out.modules()):
        for name, child in module.named_children():
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear.from_linear(child))
    if getattr(out, "output", False) is None and isinstance(getattr(out, "embed", None), nn.Embedding):
        out.output = Int8Linear(out.embed.weight)  # tied: the logits' product through the embedding
    return out
