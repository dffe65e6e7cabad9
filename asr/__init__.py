"""asr: a small, correct and fast attention encoder-decoder speech recogniser."""

from .audio import AudioError, fbank, load_audio
from .checkpoint import load_model

# The function shadows its module, as in openai/whisper: `asr.transcribe(...)` is the function,
# `from asr.transcribe import Transcriber` still reaches the module. Both import search code lazily.
from .transcribe import transcribe

__version__ = "0.1.0"

__all__ = ["AudioError", "fbank", "load_audio", "load_model", "transcribe", "__version__"]
