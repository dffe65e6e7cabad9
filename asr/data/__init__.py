"""Data: manifests (JSON Lines), corpus importers, the dataset, batching and augmentation.

Importers live in their own modules (``asr.corpora.librispeech``, ``asr.corpora.kaldi``,
``asr.corpora.fsdd``) and are imported where they are used.
"""

from asr.data.augment import augment, spec_augment
from asr.data.dataset import ASRDataset, Batch, DataError, check_skip_ratio, collate
from asr.data.filtering import filter_records
from asr.data.manifest import ManifestError, read_manifest, write_manifest

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
