"""Reorder a SentencePiece model's pieces so that its ids are another toolkit's token ids.

``asr.text.Tokenizer`` needs SentencePiece's own ids to be the model's ids (0 ``<blank>``,
1 ``<unk>``, V-1 ``<sos/eos>``). ESPnet keeps a separate token list (pieces ordered by their
frequency in the training text) and a stock SentencePiece model (0 ``<unk>``, 1 ``<s>``, 2
``</s>``). Rewriting the model's piece table in the token list's order, each piece with its own
score, gives a model that segments text as before (segmentation reads pieces and scores, never
ids) and whose ids are ESPnet's. Pieces the token list lacks are dropped (ESPnet maps them to
``<unk>`` too).

The model file is a protobuf ``ModelProto``; only its field 1 (``repeated SentencePiece
pieces``: 1 piece, 2 score, 3 type) is rewritten, every other field is copied byte for byte, so
no protobuf package is needed.
"""

from __future__ import annotations

import struct

__all__ = ["reorder_pieces", "read_pieces"]

NORMAL, UNKNOWN, CONTROL = 1, 2, 3  # SentencePiece.Type


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _enc_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf: bytes):
    """(field number, wire type, value, raw bytes of the whole field) for each top-level field."""
    i = 0
    while i < len(buf):
        start = i
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in field {field}")
        yield field, wire, value, buf[start:i]


def read_pieces(model: bytes) -> list[tuple[str, float, int]]:
    """(piece, score, type) of every piece, in id order."""
    pieces = []
    for field, _, value, _ in _fields(model):
        if field != 1:
            continue
        piece, score, kind = "", 0.0, NORMAL
        for f, _, v, _ in _fields(value):
            if f == 1:
                piece = v.decode("utf-8")
            elif f == 2:
                score = struct.unpack("<f", v)[0]
            elif f == 3:
                kind = v
        pieces.append((piece, score, kind))
    return pieces


def _piece_message(piece: str, score: float, kind: int) -> bytes:
    text = piece.encode("utf-8")
    body = b"\x0a" + _enc_varint(len(text)) + text + b"\x15" + struct.pack("<f", score)
    if kind != NORMAL:  # NORMAL is the default and is not written
        body += b"\x18" + _enc_varint(kind)
    return b"\x0a" + _enc_varint(len(body)) + body


def reorder_pieces(model: bytes, tokens: list[str], where: str = "bpe model") -> bytes:
    """A model whose piece i is ``tokens[i]``; tokens[0], [1], [-1] become <blank> (control),
    <unk> (unknown), <sos/eos> (control). Raises ValueError naming the first token the model lacks."""
    own = {p: (s, k) for p, s, k in read_pieces(model)}
    out = [_piece_message(tokens[0], 0.0, CONTROL), _piece_message(tokens[1], 0.0, UNKNOWN)]
    for t in tokens[2:-1]:
        if t not in own:
            raise ValueError(f"{where}: token {t!r} of the token list is not a piece of the SentencePiece model")
        out.append(_piece_message(t, own[t][0], NORMAL))
    out.append(_piece_message(tokens[-1], 0.0, CONTROL))
    rest = b"".join(raw for field, _, _, raw in _fields(model) if field != 1)
    return b"".join(out) + rest
