"""Data: manifests (JSON Lines), corpus importers, the dataset, batching and augmentation.

Importers live in their own modules (``asr.data.librispeech``, ``asr.data.kaldi``,
``asr.data.fsdd``) and are imported where they are used.
"""

from .augment import augment, spec_augment
from .dataset import ASRDataset, Batch, DataError, check_skip_ratio, collate
from .filtering import filter_records
from .manifest import ManifestError, read_manifest, write_manifest

__all__ = [
    "ASRDataset",
    "Batch",
    "DataError",
    "ManifestError",
    "check_skip_ratio",
    "augment",
    "collate",
    "filter_records",
    "read_manifest",
    "spec_augment",
    "write_manifest",
]
