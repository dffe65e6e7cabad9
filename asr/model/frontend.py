"""Frontends: fbank frames (B, T, F) to model frames (B, T', d_model), with exact output lengths."""

from __future__ import annotations

import torch
from torch import nn

from . import fast
from .fast import Linear

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
        x = fast.conv_stack(x, self.conv)  # = self.conv(x.unsqueeze(1)): (B, C, T', F')
        b, c, t, f = x.shape
        x = stack_frames(x.transpose(1, 2).reshape(b, t, c * f), self.stack)  # columns (stack, c, f)
        return self.proj(x), self.output_lengths(lens)  # (B, T' / stack, D)


def build_frontend(
    kind: str, input_dim: int, d_model: int, stack: int, conv_channels: int = 0, conv_stack: int = 1
) -> nn.Module:
    if kind == "linear":
        return LinearStackFrontend(input_dim, d_model, stack)
    if kind == "conv2d":
        return Conv2dFrontend(input_dim, d_model, conv_channels, conv_stack)
    raise ValueError(f"model.frontend: expected 'linear' or 'conv2d', got {kind!r}")
