#!/usr/bin/env bash
# Every speaker held out in turn (leave one speaker out): the FSDD recipe once per speaker, then one table.
#
#   bash recipes/fsdd/loso.sh [--speakers "george jackson ..."] [--exp NAME] [run.sh options ...]
#
# For each speaker S: `run.sh --test-speakers S --data data_NAME_S --exp NAME_S` (stages 1-7; the data
# and the experiment of each speaker and of each NAME are kept apart, since --seed and the prepare
# options change the data, and finished stages are skipped on a rerun), then
# exp/NAME_loso.md: the test WER of every speaker, their mean and the worst. Any other option
# (--corpus-dir, --download, --config, --seed, --set KEY=VALUE, --stage, ...) goes to every run.sh;
# the corpus is the one run.sh uses (the bundled corpus/fsdd unless --corpus-dir or --download).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/../stages.sh"

speakers=""
exp=transformer
corpus_dir=""
fetch=false
num_avg=5
pass=()
while (( $# )); do
  case "$1" in
    --speakers) speakers=$2; shift 2 ;;
    --exp) exp=$2; shift 2 ;;
    --corpus-dir) corpus_dir=$(realpath -m "$2"); shift 2 ;;
    --download) fetch=true; pass+=("$1"); shift ;;
    --num-avg) num_avg=$2; pass+=("$1" "$2"); shift 2 ;;
    --test-speakers|--data) echo "loso.sh sets $1 itself (one run per speaker)" >&2; exit 2 ;;
    --force) pass+=("$1"); shift ;;
    *) pass+=("$1" "$2"); shift 2 ;;
  esac
done
find_asr "$repo"
if [[ -z $corpus_dir ]]; then  # as run.sh chooses it
  if $fetch; then corpus_dir=$here/downloads/fsdd; else corpus_dir=$repo/corpus/fsdd; fi
fi
pass+=(--corpus-dir "$corpus_dir")
if $fetch; then  # the speakers are read from the recordings, so they must be there first
  "${ASR[@]}" download fsdd --corpus-dir "$corpus_dir"
fi
if [[ -z $speakers ]]; then  # every speaker of the corpus, from the file names ({digit}_{speaker}_{take}.flac)
  speakers=$("$PYTHON" -c 'import sys; from asr.data.fsdd import fsdd_speakers; print(*fsdd_speakers(sys.argv[1]))' \
    "$corpus_dir")
fi
echo "loso: speakers $speakers"
for s in $speakers; do
  echo "=== held out: $s"
  bash "$here/run.sh" "${pass[@]}" --test-speakers "$s" --data "data_${exp}_$s" --exp "${exp}_$s" --stop-stage 7
done
also=()  # models with a decoder were also decoded by CTC alone (run.sh): a column beside
first=($speakers)
if [[ -f $here/exp/${exp}_${first[0]}/avg$num_avg/decode_ctc_test/wer.json ]]; then
  also=(--also decode_ctc "CTC only" "CTC prefix beam search: the same models without their decoder")
fi
"$PYTHON" "$repo/tools/results_table.py" --loso --exp-prefix "$here/exp/${exp}_" --speakers $speakers --model-name "avg$num_avg" \
  "${also[@]}" --title "FSDD, every speaker held out in turn ($exp)" --out "$here/exp/${exp}_loso.md"
cat "$here/exp/${exp}_loso.md"
