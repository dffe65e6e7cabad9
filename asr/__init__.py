"""asr: a small, correct and fast attention encoder-decoder speech recogniser."""

from .audio import AudioError, fbank, load_audio

__version__ = "0.1.0"

__all__ = ["AudioError", "fbank", "load_audio", "__version__"]
