"""Frontends: fbank frames (B, T, F) to model frames (B, T', d_model), with exact output lengths."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["LinearStackFrontend", "Conv2dFrontend", "build_frontend"]


class LinearStackFrontend(nn.Module):
    """Stack ``stack`` consecutive frames into one vector and project it with one Linear.

    Subsamples by ``stack`` (a trailing partial group is dropped), so every output frame sees
    only real frames of its utterance. ``stack=1`` is the plain per-frame projection.
    """

    def __init__(self, input_dim: int, d_model: int, stack: int = 4):
        super().__init__()
        self.stack = stack
        self.proj = nn.Linear(input_dim * stack, d_model)

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
        self.proj = nn.Linear(d_model * (((input_dim - 1) // 2 - 1) // 2), d_model)

    @property
    def min_input_frames(self) -> int:
        return 7

    def output_lengths(self, lens: torch.Tensor) -> torch.Tensor:
        return torch.div(torch.div(lens - 1, 2, rounding_mode="floor") - 1, 2, rounding_mode="floor").clamp_min(0)

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(x.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.shape
        x = self.proj(x.transpose(1, 2).reshape(b, t, c * f))  # (B, T', D)
        return x, self.output_lengths(lens)


def build_frontend(kind: str, input_dim: int, d_model: int, stack: int) -> nn.Module:
    if kind == "linear":
        return LinearStackFrontend(input_dim, d_model, stack)
    if kind == "conv2d":
        return Conv2dFrontend(input_dim, d_model)
    raise ValueError(f"model.frontend: expected 'linear' or 'conv2d', got {kind!r}")
