#!/usr/bin/env bash
# Every speaker held out in turn (leave one speaker out): the FSDD recipe once per speaker, then one table.
#
#   bash recipes/fsdd/loso.sh [--speakers "george jackson ..."] [--exp NAME] [--jobs N] [run.sh options ...]
#
# For each speaker S: `run.sh --test-speakers S --data data_NAME_S --exp NAME_S` (stages 1-7; the data
# and the experiment of each speaker and of each NAME are kept apart, since --seed and the prepare
# options change the data, and finished stages are skipped on a rerun), then
# exp/NAME_loso.md: the test WER of every speaker, their mean and the worst; beside it, CTC alone and
# the models adapted to their held-out speaker (run.sh --adapt, unless 0). Any other option
# (--corpus-dir, --download, --config, --seed, --set KEY=VALUE, --stage, ...) goes to every run.sh;
# the corpus is the one run.sh uses (the bundled corpus/fsdd unless --corpus-dir or --download).
# --jobs N: N speakers at a time, each run given an equal share of the CPU's threads (OMP_NUM_THREADS,
# at least 1) and its output in exp/NAME_S.log. On the 2-core AMX Xeon in bf16, two 1-thread runs
# train 2.05x as many utterances per second as one 2-thread run (tools/bench_jobs.py, README, FSDD):
# there the model is too small for a second thread to speed up one run; limited to AVX2 in fp32 it
# is not (1.10x). The WERs may differ in the last digits from a --jobs 1 run (sums split differently
# over threads). A failed run is named; the others run to their end all the same.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/../stages.sh"

speakers=""
exp=transformer
corpus_dir=""
fetch=false
num_avg=5
adapt=2  # run.sh's default: two rounds of adaptation to the held-out speaker
jobs=1
pass=()
while (( $# )); do
  case "$1" in
    --speakers) speakers=$2; shift 2 ;;
    --exp) exp=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --corpus-dir) corpus_dir=$(realpath -m "$2"); shift 2 ;;
    --download) fetch=true; pass+=("$1"); shift ;;
    --num-avg) num_avg=$2; pass+=("$1" "$2"); shift 2 ;;
    --adapt) adapt=$2; pass+=("$1" "$2"); shift 2 ;;
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
  speakers=$("$PYTHON" -c 'import sys; from asr.corpora.fsdd import fsdd_speakers; print(*fsdd_speakers(sys.argv[1]))' \
    "$corpus_dir")
fi
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "loso.sh: --jobs expects a whole number >= 1, got '$jobs'" >&2; exit 2; }
echo "loso: speakers $speakers"
held_out() {  # held_out S: the recipe with speaker S held out
  bash "$here/run.sh" "${pass[@]}" --test-speakers "$1" --data "data_${exp}_$1" --exp "${exp}_$1" --stop-stage 7
}
failed=()
if (( jobs == 1 )); then
  for s in $speakers; do
    echo "=== held out: $s"
    held_out "$s" || failed+=("$s")
  done
else
  threads=$(( $(nproc) / jobs )); (( threads >= 1 )) || threads=1
  mkdir -p "$here/exp"
  declare -A pid_of=()
  for s in $speakers; do
    while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
    echo "=== held out: $s ($threads thread(s); output: exp/${exp}_$s.log)"
    OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads held_out "$s" >"$here/exp/${exp}_$s.log" 2>&1 &
    pid_of[$s]=$!
  done
  for s in $speakers; do
    wait "${pid_of[$s]}" || { failed+=("$s"); tail -n 20 "$here/exp/${exp}_$s.log" >&2; }
  done
fi
if (( ${#failed[@]} )); then
  echo "loso.sh: the run(s) holding out ${failed[*]} failed (see above); no table written" >&2
  exit 1
fi
also=()  # models with a decoder were also decoded by CTC alone (run.sh): a column beside
first=($speakers)
if [[ -f $here/exp/${exp}_${first[0]}/avg$num_avg/decode_ctc_test/wer.json ]]; then
  also=(--also decode_ctc "CTC only" "CTC prefix beam search: the same models without their decoder")
fi
if [[ $adapt =~ ^[1-9][0-9]*$ ]]; then  # and adapted to their held-out speaker (run.sh --adapt): columns beside
  rel=""
  for ((r = 1; r <= adapt; r++)); do rel+="adapt/avg$num_avg/"; done
  how="the models adapted to their held-out speaker, $adapt round(s) of fine-tuning on their own hypotheses of his test set"
  also+=(--also "${rel}decode" adapted "$how")
  if [[ -f $here/exp/${exp}_${first[0]}/avg$num_avg/${rel}decode_ctc_test/wer.json ]]; then
    also+=(--also "${rel}decode_ctc" "adapted, CTC only" "CTC prefix beam search, $how")
  fi
fi
"$PYTHON" -m asr results --loso --exp-prefix "$here/exp/${exp}_" --speakers $speakers --model-name "avg$num_avg" \
  "${also[@]}" --title "FSDD, every speaker held out in turn ($exp)" --out "$here/exp/${exp}_loso.md"
cat "$here/exp/${exp}_loso.md"
