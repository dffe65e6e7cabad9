#!/usr/bin/env bash
# Create tools/peers/.venv-whisper with the Whisper peers (openai-whisper, transformers, ctranslate2,
# faster-whisper, safetensors) next to the repository's torch, for tests/make_whisper_fixtures.py only.
# Nothing in `asr` imports these packages (asr's own Whisper support needs only `asr[whisper]`), and CI
# does not install them: it reads the fixtures they wrote.
#
#   bash tools/peers/setup_whisper.sh                  # reuse torch of the repository's .venv (no 3 GB download)
#   PEERS_TORCH=pypi bash tools/peers/setup_whisper.sh # install torch==$(main torch version) into the peer venv
#
# The versions are pinned: the fixtures record what these versions computed and wrote.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
main_py="$root/.venv/bin/python"
venv="$here/.venv-whisper"
torch_mode="${PEERS_TORCH:-reuse}"

openai_whisper_version="${OPENAI_WHISPER_VERSION:-20250625}"
transformers_version="${TRANSFORMERS_VERSION:-4.57.6}"
ctranslate2_version="${CTRANSLATE2_VERSION:-4.8.5}"
faster_whisper_version="${FASTER_WHISPER_VERSION:-1.2.1}"
safetensors_version="${SAFETENSORS_VERSION:-0.7.0}"

if [[ ! -x "$main_py" ]]; then
  echo "error: $main_py not found: create the repository's .venv first (see README)" >&2
  exit 1
fi
torch_version="$("$main_py" -c 'import torch; print(torch.__version__.split("+")[0])')"

if [[ ! -x "$venv/bin/python" ]]; then
  base_py="$("$main_py" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')"
  "$base_py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [[ "$torch_mode" == "reuse" ]]; then
  # The peer venv sees the main venv's packages (torch, numpy, librosa among them) after its own: what
  # pip installs here shadows them, and pip never changes the main venv (it is outside this env).
  main_site="$("$main_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$main_site" >"$site/_asr_main_venv.pth"
else
  rm -f "$site/_asr_main_venv.pth"
  "${pip[@]}" "torch==$torch_version"
fi

"${pip[@]}" \
  "openai-whisper==$openai_whisper_version" \
  "transformers==$transformers_version" \
  "ctranslate2==$ctranslate2_version" \
  "faster-whisper==$faster_whisper_version" \
  "safetensors==$safetensors_version" \
  soundfile "torch==$torch_version"

# asr itself (editable, no dependencies): the fixture generator imports it beside the peers.
"${pip[@]}" --no-deps -e "$root"

"$venv/bin/python" - <<EOF
import ctranslate2, faster_whisper, safetensors, torch, transformers, whisper
assert torch.__version__.split("+")[0] == "$torch_version", torch.__version__
from ctranslate2.converters import TransformersConverter  # noqa: F401
from transformers import WhisperForConditionalGeneration  # noqa: F401
print(f"whisper peers ready: openai-whisper {whisper.__version__}, transformers {transformers.__version__}, "
      f"ctranslate2 {ctranslate2.__version__}, faster-whisper {faster_whisper.__version__}, torch {torch.__version__}")
EOF
