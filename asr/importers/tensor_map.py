"""Another toolkit's tensors gathered under ``asr``'s names: the one loop both importers share."""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["gather_tensors"]


def gather_tensors(
    own: dict[str, torch.Tensor], pairs: Iterable[tuple[str, list[str]]], theirs: dict[str, torch.Tensor],
    where: str, error: type[Exception], needs: str,
) -> tuple[dict[str, torch.Tensor], set[str]]:
    """Each of our tensors (``own``'s name and shape) from its sources in ``theirs``, concatenated along
    rows; a source '' stands for zeros (a bias the other toolkit leaves out). Returns the tensors and the
    names used. A missing or misshapen source is ``error`` naming it and both shapes (``needs``: who
    needs the shape, e.g. "the config's model needs")."""
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for ours, srcs in pairs:
        want = tuple(own[ours].shape)
        part = (want[0] // len(srcs), *want[1:])
        parts = []
        for s in srcs:
            if s == "":
                parts.append(torch.zeros(part))
                continue
            if s not in theirs:
                raise error(f"{where}: has no tensor {s!r}; {needs} one of shape {part}")
            if tuple(theirs[s].shape) != part:
                raise error(f"{where}: tensor {s!r} has shape {tuple(theirs[s].shape)}, {needs} {part}")
            parts.append(theirs[s].float())
            used.add(s)
        out[ours] = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
    return out, used
