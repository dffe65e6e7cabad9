#!/usr/bin/env bash
# Whisper tiny.en fine-tuned with every FSDD speaker held out in turn, then one table.
#
#   bash recipes/fsdd_whisper/loso.sh [--speakers "george jackson ..."] [run.sh options ...]
#
# For each speaker S: `run.sh --test-speakers S --data data_S --exp finetune_S` (one after another; each
# about 13 minutes on 2 cores limited to AVX2), then exp/finetune_loso.md: the unseen speaker's test WER
# of every run (joint CTC/attention), beside attention alone and tiny.en zero-shot, their means and worst.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/../stages.sh"

speakers="george jackson lucas nicolas yweweler"
pass=()
while (( $# )); do
  case "$1" in
    --speakers) speakers=$2; shift 2 ;;
    *) pass+=("$1"); shift ;;
  esac
done
cd "$here"
find_asr "$repo"
for spk in $speakers; do
  echo "=== held out: $spk"
  bash "$here/run.sh" --test-speakers "$spk" --data "data_$spk" --exp "finetune_$spk" "${pass[@]}"
done
# shellcheck disable=SC2086
"$PYTHON" -m asr results --loso --exp-prefix exp/finetune_ --speakers $speakers --model-name . \
  --decode "Whisper's rules, beam 5, joint CTC/attention (CTC 0.3)" \
  --also decode_att "attention alone" "Whisper's rules, beam 5, no CTC" \
  --also zero_shot "tiny.en zero-shot" "Whisper's rules, beam 5, as imported (30 s windows)" \
  --title "FSDD, Whisper tiny.en fine-tuned, every speaker held out in turn (digits read as words)" \
  --out exp/finetune_loso.md
cat exp/finetune_loso.md
