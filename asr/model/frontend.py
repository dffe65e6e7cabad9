"""Frontends: fbank frames (B, T, F) to model frames (B, T', d_model), with exact output lengths."""

from __future__ import annotations

import torch
from torch import nn

from asr.model import fast
from asr.model.fast import Linear

__all__ = ["LinearStackFrontend", "LinearNormFrontend", "Conv2dFrontend", "Conv1dFrontend", "build_frontend"]


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

    def output_lengths(self, lens: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
        return torch.div(lens, self.stack, rounding_mode="floor")

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.proj(stack_frames(x, self.stack)), self.output_lengths(lens)  # (B, T / stack, D)


class LinearNormFrontend(nn.Module):
    """ESPnet's ``input_layer: linear``: Linear, LayerNorm, dropout, ReLU on every frame (no subsampling).

    Its LayerNorm is PyTorch's (eps 1e-5) in ESPnet too, unlike the Transformer layers' 1e-12.
    """

    def __init__(self, input_dim: int, d_model: int, dropout: float = 0.0):
        super().__init__()
        self.proj = Linear(input_dim, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    @property
    def min_input_frames(self) -> int:
        return 1

    def output_lengths(self, lens: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
        return lens

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(self.dropout(self.norm(self.proj(x)))), lens  # (B, T, D)


# (kernel, stride) of each convolution: "conv2d" is ours and ESPnet's Conv2dSubsampling, the others
# ESPnet's Conv2dSubsampling6 and Conv2dSubsampling8.
CONV_LAYERS = {"conv2d": ((3, 2), (3, 2)), "conv2d6": ((3, 2), (5, 3)), "conv2d8": ((3, 2), (3, 2), (3, 2))}


class Conv2dFrontend(nn.Module):
    """Stride-2 (or 3) convolutions with ReLU (4x, 6x or 8x subsampling in time and frequency), then Linear.

    Unpadded ("valid") convolutions: output frame t reads input frames 4t..4t+6 (``conv2d``), all
    inside the utterance for t < output length, so padding never reaches a real output frame.
    ``stack > 1`` concatenates that many consecutive convolution frames before the Linear
    (``stack=2``: 8x subsampling, 80 ms frames, at almost no cost; a trailing partial group is dropped).

    ``espnet_lengths``: ESPnet's output lengths instead, ceil(len / stride) per convolution (capped
    by the batch's output length), which count frames that read padding; they equal ours for the
    longest utterance of a batch, so for a batch of one.
    """

    def __init__(
        self, input_dim: int, d_model: int, channels: int = 0, stack: int = 1, kind: str = "conv2d",
        espnet_lengths: bool = False,
    ):
        super().__init__()
        c = channels or d_model
        self.kind = kind
        self.layers = CONV_LAYERS[kind]
        self.stack = stack
        self.espnet_lengths = espnet_lengths
        convs: list[nn.Module] = []
        f = input_dim
        for i, (k, s) in enumerate(self.layers):
            convs += [nn.Conv2d(1 if i == 0 else c, c, k, s), nn.ReLU(inplace=True)]  # outputs unneeded for backward
            f = (f - k) // s + 1
        self.conv = nn.Sequential(*convs)
        self.proj = Linear(stack * c * f, d_model)

    @property
    def min_input_frames(self) -> int:
        n = self.stack  # frames needed for the first `stack` outputs, from the last convolution backwards
        for k, s in reversed(self.layers):
            n = (n - 1) * s + k
        return n

    def _conv_lengths(self, lens: torch.Tensor) -> torch.Tensor:
        for k, s in self.layers:
            lens = torch.div(lens - k, s, rounding_mode="floor") + 1
        return lens.clamp_min(0)

    def output_lengths(self, lens: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
        """Output frames per utterance; ``max_len``: the padded input length of the batch (default: each
        utterance alone, where ESPnet's lengths equal ours)."""
        if self.espnet_lengths:  # ESPnet slices its mask x_mask[:, :, :-(k-1):s] per convolution
            total = self._conv_lengths(lens if max_len is None else lens.new_tensor(max_len))
            out = lens
            for _, s in self.layers:
                out = torch.div(out + s - 1, s, rounding_mode="floor")
            return torch.minimum(out, total)
        return torch.div(self._conv_lengths(lens), self.stack, rounding_mode="floor")

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out_lens = self.output_lengths(lens, x.shape[1])
        if self.kind == "conv2d":
            # = self.conv(x.unsqueeze(1)): (B, C, T', F'); in training on CPU the frames after each
            # utterance's last real one may be left 0 (nothing reads them: fast.real_frames)
            x = fast.conv_stack(x, self.conv, out_lens * self.stack)
        else:
            x = self.conv(x.unsqueeze(1))
        x = stack_frames(fast.flatten_channels(x), self.stack)  # (B, T', stack * C * F'), columns (stack, c, f)
        return self.proj(x), out_lens  # (B, T' / stack, D)


class Conv1dFrontend(nn.Module):
    """Whisper's: Conv1d (kernel 3, padding 1) + GELU, then Conv1d (kernel 3, stride 2, padding 1) + GELU.

    Subsamples by 2 (output frame t reads input frames 2t - 2 .. 2t + 2, zero beyond the edges);
    ``ceil(T / 2)`` output frames. On Whisper's 30-second windows every frame is real.
    """

    def __init__(self, input_dim: int, d_model: int):
        super().__init__()
        self.conv1 = nn.Conv1d(input_dim, d_model, 3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, 3, stride=2, padding=1)

    @property
    def min_input_frames(self) -> int:
        return 1

    def output_lengths(self, lens: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
        return torch.div(lens + 1, 2, rounding_mode="floor")

    def forward(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gelu = nn.functional.gelu
        x = gelu(self.conv2(gelu(self.conv1(x.transpose(1, 2)))))  # (B, D, ceil(T / 2))
        return x.transpose(1, 2), self.output_lengths(lens)  # (B, T', D)


def build_frontend(
    kind: str, input_dim: int, d_model: int, stack: int, conv_channels: int = 0, conv_stack: int = 1,
    dropout: float = 0.0, espnet_lengths: bool = False,
) -> nn.Module:
    if kind == "linear":
        return LinearStackFrontend(input_dim, d_model, stack)
    if kind == "linear_norm":
        return LinearNormFrontend(input_dim, d_model, dropout)
    if kind == "conv1d":
        return Conv1dFrontend(input_dim, d_model)
    if kind in CONV_LAYERS:
        return Conv2dFrontend(input_dim, d_model, conv_channels, conv_stack, kind, espnet_lengths)
    raise ValueError(
        f"model.frontend: expected one of 'linear', 'linear_norm', 'conv1d', {', '.join(CONV_LAYERS)}; got {kind!r}"
    )
