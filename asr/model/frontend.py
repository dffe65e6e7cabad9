"""Frontends: fbank frames (B, T, F) to model frames (B, T', d_model), with exact output lengths."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .linear import Linear

__all__ = ["LinearStackFrontend", "Conv2dFrontend", "build_frontend"]


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
        b, t, f = x.shape
        t_out = t // self.stack
        x = x[:, : t_out * self.stack].reshape(b, t_out, f * self.stack)  # (B, T', stack*F)
        return self.proj(x), self.output_lengths(lens)


class Conv2dFrontend(nn.Module):
    """Two 3x3 stride-2 convolutions with ReLU (4x subsampling in time and frequency), then Linear.

    Unpadded ("valid") convolutions: output frame t reads input frames 4t..4t+6, all inside the
    utterance for t < output length, so padding never reaches a real output frame.
    """

    def __init__(self, input_dim: int, d_model: int):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, d_model, 3, 2),
            nn.ReLU(inplace=True),  # conv outputs are not needed for backward
            nn.Conv2d(d_model, d_model, 3, 2),
            nn.ReLU(inplace=True),  # conv outputs are not needed for backward
        )
        self.proj = Linear(d_model * (((input_dim - 1) // 2 - 1) // 2), d_model)

    @property
    def min_input_frames(self) -> int:
        return 7

    def output_lengths(self, lens: torch.Tensor) -> torch.Tensor:
        return torch.div(torch.div(lens - 1, 2, rounding_mode="floor") - 1, 2, rounding_mode="floor").clamp_min(0)

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.device.type == "cpu" and (not torch.is_grad_enabled() or _cpu_autocast_bf16()):
            x = self._channels_last(x)
        else:
            x = self.conv(x.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.shape
        x = self.proj(x.transpose(1, 2).reshape(b, t, c * f))  # (B, T', D)
        return x, self.output_lengths(lens)

    def _channels_last(self, x: torch.Tensor) -> torch.Tensor:
        """The same convolutions, faster on CPU in inference and in bf16 training: the first (one input
        channel, a 9-wide reduction that oneDNN runs memory-bound) as one GEMM over 3x3 patches that
        writes channels-last, the second in channels-last with channels-last weights.
        (B, T, F) -> (B, C, T', F'). Measured on 8 x 1000 frames, d 256, 2 threads: 1.8x faster in
        fp32 inference, forward + backward 0.35 s instead of 0.53 under bf16 autocast; in fp32
        training 1.2x slower (oneDNN's fp32 weight gradient in channels-last), so not used there."""
        c1, c2 = self.conv[0], self.conv[2]
        b = x.shape[0]
        patches = x.unfold(1, 3, 2).unfold(2, 3, 2)  # (B, T1, F1, 3, 3), stride 2 in time and frequency
        t1, f1 = patches.shape[1:3]
        h = torch.addmm(c1.bias, patches.reshape(-1, 9), c1.weight.view(c1.out_channels, 9).t()).relu_()
        h = h.view(b, t1, f1, -1).permute(0, 3, 1, 2)  # (B, C, T1, F1) in channels-last memory
        w2 = c2.weight.contiguous(memory_format=torch.channels_last)
        return F.conv2d(h, w2, c2.bias, c2.stride).relu_()


def _cpu_autocast_bf16() -> bool:
    return torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def build_frontend(kind: str, input_dim: int, d_model: int, stack: int) -> nn.Module:
    if kind == "linear":
        return LinearStackFrontend(input_dim, d_model, stack)
    if kind == "conv2d":
        return Conv2dFrontend(input_dim, d_model)
    raise ValueError(f"model.frontend: expected 'linear' or 'conv2d', got {kind!r}")
