"""asr: a small, correct and fast attention encoder-decoder speech recogniser."""

from asr.features.audio import AudioError, fbank, load_audio
from asr.inference.recognizer import load_model

# As in openai/whisper, `asr.transcribe(...)` is the function; the module is asr.inference.transcribe.
# Both import search code lazily.
from asr.inference.transcribe import transcribe

__version__ = "0.1.0"

__all__ = ["AudioError", "fbank", "load_audio", "load_model", "transcribe", "__version__"]
