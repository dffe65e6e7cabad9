"""Inference: a trained recogniser (:class:`Recognizer`, :func:`load_model`), decoding a manifest
in batches, and transcribing files of any length (:mod:`asr.inference.transcribe`)."""

from asr.inference.recognizer import Recognizer, load_model

__all__ = ["Recognizer", "load_model"]
