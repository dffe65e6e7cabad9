"""The self-attention keys and values of incremental decoding, kept in place for N hypotheses.

One buffer holds every layer: (N, capacity, layers, 2, H, d_k), hypothesis-major and then
time-major, so that

- appending a token writes one time slot per layer (no ``torch.cat`` of the whole history), and
- reordering hypotheses (beam search keeps the parents of its survivors) copies, in place, only
  the rows that change, one contiguous history each; only when rows would be read after being
  overwritten (not in beam search) does it copy every row into a second buffer that the two
  caches then swap.

Nothing is allocated per step: on a CPU, a fresh tensor of this size is page-faulted in by the
kernel on first touch, which cost more than the language model's matrix products themselves
(``tools/bench_lm.py``). The capacity grows by ``CHUNK`` time slots when full.

On a CPU the buffer is fp32 even under bf16 autocast, and the attention over it runs in fp32: in
torch 2.14 the CPU's bf16 ``scaled_dot_product_attention`` for one query over a short history is
several times slower than fp32, and the history is small.

The cache is consumed by what it returns: :meth:`index_select` hands its buffer to the new cache
(as the spare, when it copied into the other), so only the returned cache may be used afterwards
(as with ``x = f(x)``).
"""

from __future__ import annotations

import torch

__all__ = ["KVCache", "KVSlot"]

CHUNK = 32  # time slots added when the buffer is full


class KVSlot:
    """One layer's view of a :class:`KVCache`: ``append`` writes the newest token's key and value."""

    __slots__ = ("cache", "layer")

    def __init__(self, cache: KVCache, layer: int):
        self.cache, self.layer = cache, layer

    def append(self, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the newest token's key and value, kv (N, 2, H, d_k), at the current position;
        returns all keys and values so far, (N, H, t + 1, d_k) each (views of the buffer)."""
        return self.cache._append(self.layer, kv)


class KVCache:
    """Keys and values of ``layers`` self-attention layers; :attr:`length` tokens seen so far.

    The buffer is created by the first :meth:`KVSlot.append` (rows, heads, width and dtype are
    those of the first keys); call :meth:`advance` once per step, after the last layer.
    """

    def __init__(self, layers: int):
        self.layers = layers
        self.length = 0
        self._buf: torch.Tensor | None = None  # (N, capacity, layers, 2, H, d_k)
        self._spare: torch.Tensor | None = None  # where the next reorder writes

    def slots(self) -> list[KVSlot]:
        return [KVSlot(self, i) for i in range(self.layers)]

    def advance(self) -> None:
        """The step is done: every layer has appended its token."""
        self.length += 1

    def _append(self, layer: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, _, h, d_k = kv.shape
        t = self.length
        if self._buf is None:
            cpu_bf16 = kv.device.type == "cpu" and kv.dtype == torch.bfloat16  # see the module's docstring
            self._buf = kv.new_empty(n, CHUNK, self.layers, 2, h, d_k, dtype=torch.float32 if cpu_bf16 else kv.dtype)
        elif t == self._buf.shape[1]:  # full: a longer buffer, the history copied once
            grown = self._buf.new_empty(n, t + CHUNK, *self._buf.shape[2:])
            grown[:, :t] = self._buf[:, :t]
            self._buf, self._spare = grown, None
        self._buf[:, t, layer] = kv  # (N, 2, H, d_k)
        kv = self._buf[:, : t + 1, layer].permute(2, 0, 3, 1, 4)  # (2, N, H, t + 1, d_k)
        return kv[0], kv[1]

    def index_select(self, index: torch.Tensor) -> KVCache:
        """Keep (reorder, repeat, drop) hypotheses ``index``, e.g. the parents of surviving beams.

        Returns the new cache; this one is consumed. On a CPU the rows move in place, one
        contiguous copy per row that changes, whenever no row is read after it has been written
        (taking rows in order, no source is an earlier destination). Beam search arranges this:
        a parent's first child takes the parent's own row, the other children rows whose
        hypotheses left no child (sources stay put), and when utterances stop, the rows of those
        that go on move down (``asr.decode.beam_search``). Otherwise (and on a GPU, which copies
        every row at its bandwidth) the rows are copied into the spare buffer, which the new cache
        then uses."""
        t = self.length
        if self._buf is None:
            return self._pass_on(None, None)
        n, rows, cap = index.numel(), self._buf.shape[0], self._buf.shape[1]
        hist = self._buf[:, :t]
        if n <= rows and index.device.type == "cpu":
            moved = torch.nonzero(index != torch.arange(n, device=index.device)).flatten()
            src = index[moved]
            written = torch.zeros(rows, dtype=torch.bool)
            written[moved] = True
            if not bool((written[src] & (src < moved)).any()):  # no row is read after it was written
                for d, r in zip(moved.tolist(), src.tolist(), strict=True):
                    hist[d].copy_(hist[r])  # one contiguous block per row
                return self._pass_on(self._buf[:n], self._spare)
        spare = self._spare
        if spare is None or spare.shape[0] < n or spare.shape[1] != cap:
            spare = self._buf.new_empty(n, *self._buf.shape[1:])
        torch.index_select(hist, 0, index, out=spare[:n, :t])
        return self._pass_on(spare[:n], self._buf)

    def _pass_on(self, buf: torch.Tensor | None, spare: torch.Tensor | None) -> KVCache:
        """The cache that continues from this one with these buffers; this one is consumed."""
        new = KVCache(self.layers)
        new.length, new._buf, new._spare = self.length, buf, spare
        self._buf = self._spare = None
        return new
