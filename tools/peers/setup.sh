#!/usr/bin/env bash
# Create tools/peers/.venv with ESPnet 202511 and SpeechBrain 1.1.2 next to the repository's torch,
# for tools/bench.py only. Nothing in `asr` imports these packages and CI does not install them.
#
#   bash tools/peers/setup.sh             # reuse torch/torchaudio of the repository's .venv (no 3 GB download)
#   PEERS_TORCH=pypi bash tools/peers/setup.sh   # install torch==$(main torch version) into the peer venv
#
# Why the care: every ESPnet release from 202412 to 202511 pins setuptools<74, while torch 2.13+
# needs setuptools>=77. So ESPnet is installed with --no-deps and then its own requirements
# without that pin; its dependency ci_sdr also needs --no-deps with a current pip.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
main_py="$root/.venv/bin/python"
venv="$here/.venv"
espnet_version="${ESPNET_VERSION:-202511}"
speechbrain_version="${SPEECHBRAIN_VERSION:-1.1.2}"
torch_mode="${PEERS_TORCH:-reuse}"

if [[ ! -x "$main_py" ]]; then
  echo "error: $main_py not found: create the repository's .venv first (see README)" >&2
  exit 1
fi
torch_version="$("$main_py" -c 'import torch; print(torch.__version__.split("+")[0])')"
ta_version="$("$main_py" -c 'import torchaudio; print(torchaudio.__version__.split("+")[0])')"
py_version="$("$main_py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"

if [[ ! -x "$venv/bin/python" ]]; then
  "$main_py" -c 'import sys; print(sys.base_prefix)' >/dev/null
  base_py="$("$main_py" -c 'import sys, os; print(os.path.join(sys.base_prefix, "bin", "python3"))')"
  "$base_py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)

site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [[ "$torch_mode" == "reuse" ]]; then
  # The peer venv sees the main venv's packages (torch among them) after its own: what pip
  # installs here shadows them, and pip never changes the main venv (it is outside this env).
  main_site="$("$main_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$main_site" >"$site/_asr_main_venv.pth"
else
  rm -f "$site/_asr_main_venv.pth"
  "${pip[@]}" "torch==$torch_version" "torchaudio==$ta_version"
fi

# ESPnet: the package alone, then its requirements without the setuptools<74 pin.
"${pip[@]}" --no-deps "espnet==$espnet_version"
# ci_sdr (speech enhancement losses, unused for ASR) declares a git URL dependency that newer pips
# reject even with --no-deps: warn and go on when that happens.
"${pip[@]}" --no-deps ci_sdr || echo "warning: ci_sdr not installed (not needed for ASR)" >&2
"${pip[@]}" \
  "setuptools>=77" packaging "configargparse>=1.2.1" typeguard humanfriendly "scipy>=1.4.1" filelock \
  "librosa>=0.10.2" "jamo==0.4.1" "PyYAML>=5.1.2" "soundfile>=0.10.2" "h5py>=2.10.0" "kaldiio>=2.18.0" \
  torch_complex "nltk>=3.4.5" "numpy>=2.0.0" protobuf hydra-core opt-einsum lightning \
  "sentencepiece==0.2.0" "pyworld>=0.3.4" "pypinyin<=0.44.0" espnet_tts_frontend "fast-bss-eval==0.1.3" \
  "asteroid_filterbanks==0.4.0" editdistance einops "importlib-metadata<5.0" \
  "torch==$torch_version" "torchaudio==$ta_version"

# asr itself (editable, no dependencies): the fixture generators in tests/ import it beside ESPnet.
"${pip[@]}" --no-deps -e "$root"

# SpeechBrain installs normally (torch already satisfied).
"${pip[@]}" "speechbrain==$speechbrain_version" "torch==$torch_version" "torchaudio==$ta_version"

"$venv/bin/python" - <<EOF
import espnet, speechbrain, torch
assert torch.__version__.split("+")[0] == "$torch_version", torch.__version__
from espnet2.asr.espnet_model import ESPnetASRModel  # noqa: F401
from speechbrain.lobes.models.transformer.TransformerASR import TransformerASR  # noqa: F401
print(f"peers ready (python $py_version): espnet {espnet.__version__}, speechbrain {speechbrain.__version__}, torch {torch.__version__}")
EOF
