"""Readers of other toolkits' trained models: each writes an ordinary ``asr`` model directory."""

from asr.importers.espnet import EspnetImportError, import_espnet

__all__ = ["import_espnet", "EspnetImportError"]
