"""Row-wise blocks on a batch's real frames only, in training (reference: the block on every frame).

A padded batch (lengths 850-1000 frames: 7.5% padding) runs the encoder's feed-forward blocks, its
largest products, on padding too. Padding reaches no real frame (the self-attention masks it as a
key, the losses stop at each length), so a row-wise block may skip it: :func:`on_real_frames` runs
the block on the real frames gathered into one matrix and puts the result back with zeros on the
padding. Real frames' outputs and every gradient equal the reference's to float32 rounding
(``tests/test_perf_equivalence.py::test_encoder_ffn_on_real_frames_only_equals_every_frame``).

The same path has the Conv2d frontend's second convolution skip the frames after each
utterance's last real one where it runs in chunks (``conv_patch_train``: fp32 training on CPUs
without AVX-512 kernels); they are left 0 (``asr.model.fast.conv_channels_last``).

Only where autograd records (training) on a CPU, under the speed path ``real_frames``: outside
autograd (decoding, validation) every frame runs as before, and on a GPU finding the real frames
would make the host wait for the device. Measured with ``tools/bench_paths.py --paths real_frames``
(docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from asr import speed

__all__ = ["real_rows", "on_real_frames"]


def real_rows(keep: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """The indices of the real frames of ``x`` (B, T, D) flattened to (B * T, D), from ``keep``
    (B*T elements, True on real frames); None where every frame runs (no padding, outside autograd,
    not a CPU, or the path is off)."""
    if x.device.type != "cpu" or not torch.is_grad_enabled() or not speed.enabled("real_frames"):
        return None
    real = keep.flatten().nonzero().squeeze(1)
    return None if real.numel() == keep.numel() else real


def on_real_frames(block: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, real: torch.Tensor | None):
    """``block(x)`` for a row-wise ``block``, on the rows ``real`` of ``x`` (B, T, D) only, 0 on the
    others; every row when ``real`` is None."""
    if real is None:
        return block(x)
    flat = x.reshape(-1, x.shape[-1])
    y = block(flat.index_select(0, real))
    return flat.new_zeros(flat.shape[0], y.shape[-1]).index_copy(0, real, y).view(*x.shape[:-1], y.shape[-1])
