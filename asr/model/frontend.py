"""Frontends: fbank frames (B, T, F) to model frames (B, T', d_model), with exact output lengths."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import speed
from .linear import Linear, linear, onednn_mm

__all__ = ["LinearStackFrontend", "Conv2dFrontend", "build_frontend"]


def stack_frames(x: torch.Tensor, stack: int) -> torch.Tensor:
    """(B, T, D) -> (B, T // stack, stack * D): each group of ``stack`` consecutive frames side by side
    (a trailing partial group is dropped)."""
    b, t, d = x.shape
    return x[:, : t // stack * stack].reshape(b, t // stack, stack * d)


class LinearStackFrontend(nn.Module):
    """Stack ``stack`` consecutive frames into one vector and project it with one Linear.

    Subsamples by ``stack`` (a trailing partial group is dropped), so every output frame sees
    only real frames of its utterance. ``stack=1`` is the plain per-frame projection.
    """

    def __init__(self, input_dim: int, d_model: int, stack: int = 4):
        super().__init__()
        self.stack = stack
        self.proj = Linear(input_dim * stack, d_model)

    @property
    def min_input_frames(self) -> int:
        return self.stack

    def output_lengths(self, lens: torch.Tensor) -> torch.Tensor:
        return torch.div(lens, self.stack, rounding_mode="floor")

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.proj(stack_frames(x, self.stack)), self.output_lengths(lens)  # (B, T / stack, D)


class Conv2dFrontend(nn.Module):
    """Two 3x3 stride-2 convolutions with ReLU (4x subsampling in time and frequency), then Linear.

    Unpadded ("valid") convolutions: output frame t reads input frames 4t..4t+6, all inside the
    utterance for t < output length, so padding never reaches a real output frame. ``stack > 1``
    concatenates that many consecutive convolution frames before the Linear (``stack=2``: 8x
    subsampling, 80 ms frames, at almost no cost; a trailing partial group is dropped).
    """

    def __init__(self, input_dim: int, d_model: int, channels: int = 0, stack: int = 1):
        super().__init__()
        c = channels or d_model
        self.stack = stack
        self.conv = nn.Sequential(
            nn.Conv2d(1, c, 3, 2),
            nn.ReLU(inplace=True),  # conv outputs are not needed for backward
            nn.Conv2d(c, c, 3, 2),
            nn.ReLU(inplace=True),  # conv outputs are not needed for backward
        )
        self.proj = Linear(stack * c * (((input_dim - 1) // 2 - 1) // 2), d_model)

    @property
    def min_input_frames(self) -> int:
        return 4 * self.stack + 3  # the convolutions' first `stack` output frames read input frames 0..4*stack+2

    def output_lengths(self, lens: torch.Tensor) -> torch.Tensor:
        conv = torch.div(torch.div(lens - 1, 2, rounding_mode="floor") - 1, 2, rounding_mode="floor").clamp_min(0)
        return torch.div(conv, self.stack, rounding_mode="floor")

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.stack
        if x.device.type != "cpu" or not speed.enabled("conv_channels_last"):
            x = self.conv(x.unsqueeze(1))  # (B, C, T', F')
            b, c, t, f = x.shape
            x = stack_frames(x.transpose(1, 2).reshape(b, t, c * f), s)  # columns (stack, c, f)
            return self.proj(x), self.output_lengths(lens)  # (B, T' / stack, D)
        x = self._channels_last(x)  # (B, C, T', F') in channels-last memory: (B, T', F', C) is a free view
        b, c, t, f = x.shape
        w = self.proj.weight.view(-1, s, c, f).transpose(2, 3).reshape(-1, s * f * c)  # columns (s, c, f) -> (s, f, c)
        x = stack_frames(x.permute(0, 2, 3, 1).reshape(b, t, f * c), s)
        return linear(x, w, self.proj.bias), self.output_lengths(lens)

    def _channels_last(self, x: torch.Tensor) -> torch.Tensor:
        """The same convolutions as ``self.conv``, about 1.5x faster on CPU: the first (one input channel,
        a 9-wide reduction that oneDNN runs memory-bound) as one GEMM over 3x3 patches that writes
        channels-last, the second in channels-last with channels-last weights. Plain fp32 training
        goes through :class:`_ConvStackChannelsLast` (oneDNN's fp32 channels-last weight gradient is
        slow). (B, T, F) -> (B, C, T', F') in channels-last memory."""
        c1, c2 = self.conv[0], self.conv[2]
        fp32_training = torch.is_grad_enabled() and x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
        if fp32_training and not x.requires_grad:
            return _ConvStackChannelsLast.apply(x, c1.weight, c1.bias, c2.weight, c2.bias)
        return _conv_stack(x, c1.weight, c1.bias, c2.weight, c2.bias)[2]


def _patches3x3(x: torch.Tensor) -> torch.Tensor:
    """(B, T, F) -> (B, T1, F1, 9): the 3x3 stride-2 windows of the first convolution (a view)."""
    p = x.unfold(1, 3, 2).unfold(2, 3, 2)  # (B, T1, F1, 3, 3)
    return p.reshape(*p.shape[:3], 9)


def _conv1_patch_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """relu(conv1(x)) as one GEMM over 3x3 patches, (B, C, T1, F1) in channels-last memory."""
    p = _patches3x3(x)
    b, t1, f1, _ = p.shape
    w_t = weight.view(weight.shape[0], 9).t().contiguous()  # contiguous: its gradient is then p^T g, not (g^T p)^T
    h = torch.addmm(bias, p.reshape(-1, 9), w_t).relu_()  # (B * T1 * F1, C)
    return h.view(b, t1, f1, -1).permute(0, 3, 1, 2)


def _conv_stack(x, w1, b1, w2, b2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """relu(conv2(relu(conv1(x)))) channels-last: (conv1 output h, w2 in channels-last, output y)."""
    h = _conv1_patch_gemm(x, w1, b1)  # (B, C, T1, F1) channels-last
    w2 = w2.contiguous(memory_format=torch.channels_last)
    return h, w2, F.conv2d(h, w2, b2, 2).relu_()


class _ConvStackChannelsLast(torch.autograd.Function):
    """relu(conv2(relu(conv1(x)))) for fp32 CPU training, channels-last throughout, backward written
    out: the second convolution's input gradient from oneDNN (channels-last, fast) but its weight
    gradient as one oneDNN matrix product over its 3x3 input patches (oneDNN's channels-last fp32
    weight gradient took 0.50 s here, the patch product 0.2 s with the copy). Measured on 8 x 1000
    frames, d 256, 2 threads: frontend forward + backward 0.96 -> 0.7 s. The input needs no gradient
    (fbank features)."""

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2):
        h, w2, y = _conv_stack(x, w1, b1, w2, b2)
        ctx.save_for_backward(x, h, w2, y)
        return y

    @staticmethod
    def backward(ctx, gy):
        x, h, w2, y = ctx.saved_tensors
        gz = torch.where(y > 0, gy, 0).contiguous(memory_format=torch.channels_last)  # (B, C, T2, F2)
        bsz, c, t2, f2 = gz.shape
        gz_rows = gz.permute(0, 2, 3, 1).reshape(-1, c)  # (B * T2 * F2, C), a view
        h_cl = h.permute(0, 2, 3, 1)  # (B, T1, F1, C) contiguous
        sb, st, sf, sc = h_cl.stride()
        patches = h_cl.as_strided((bsz, t2, f2, 3, 3, c), (sb, 2 * st, 2 * sf, st, sf, sc)).reshape(-1, 9 * c)
        gw2 = onednn_mm(gz_rows.t(), patches.t()).view(c, 3, 3, c).permute(0, 3, 1, 2)  # (C_out, C_in, 3, 3)
        del patches
        gb2 = gz_rows.sum(0)
        gh = torch.ops.aten.convolution_backward(
            gz, h, w2, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1, [True, False, False]
        )[0]  # (B, C, T1, F1) channels-last
        gh_rows = torch.ops.aten.threshold_backward(gh.permute(0, 2, 3, 1), h_cl, 0).view(-1, c)  # ReLU: 0 where h is 0
        gw1 = (_patches3x3(x).reshape(-1, 9).t() @ gh_rows).t().reshape(c, 1, 3, 3)
        return None, gw1, gh_rows.sum(0), gw2.contiguous(), gb2


def build_frontend(
    kind: str, input_dim: int, d_model: int, stack: int, conv_channels: int = 0, conv_stack: int = 1
) -> nn.Module:
    if kind == "linear":
        return LinearStackFrontend(input_dim, d_model, stack)
    if kind == "conv2d":
        return Conv2dFrontend(input_dim, d_model, conv_channels, conv_stack)
    raise ValueError(f"model.frontend: expected 'linear' or 'conv2d', got {kind!r}")
