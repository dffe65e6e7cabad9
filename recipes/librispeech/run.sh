#!/usr/bin/env bash
# LibriSpeech: from download to a WER table.
#
#   bash recipes/librispeech/run.sh [--train-set train-clean-100|train-960] [--ngpu N] [--corpus-dir DIR]
#                                   [--stage N] [--stop-stage M] [--force] [--set KEY=VALUE ...]
#                                   [--whisper SRC [--whisper-tokenizer FILE]]
#
# Stages (each one `asr` command, each skipped when already done; logs in data/logs and exp/<exp>/logs):
#   0 download the subsets from OpenSLR (resumable, MD5-checked; skips what --corpus-dir already has)
#   1 manifests                                    -> data/<subset>.jsonl (+ data/train-960.jsonl)
#   2 global CMVN statistics of the training set    -> data/<train-set>/cmvn.json
#   3 SentencePiece tokenizer                       -> data/<train-set>/tokenizer/
#   4 training (torchrun over --ngpu GPUs)          -> exp/<exp>/ (a model directory)
#   5 average of the best checkpoints               -> exp/<exp>/avg<N>/
#   6 decoding of the test sets (beam 10, CTC 0.3)
#   7 scoring                                       -> exp/<exp>/RESULTS.md
# With --whisper SRC (fine-tune a published Whisper: an OpenAI .pt, a Hugging Face or a CTranslate2 folder):
#   2 nothing (Whisper's log-mel is normalised as it was trained)
#   3 asr import whisper SRC (--whisper-tokenizer: a .pt's tokenizer.json) -> exp/<name of SRC>/
#   4 fine-tuning: the imported config, then configs/librispeech/whisper_finetune.yaml (--config), from the
#     imported weights with a fresh CTC head; 5-7 as above (average of the 5 best, beam 5, Whisper's rules)
# With --lm (shallow fusion with a Transformer LM; configs/librispeech/lm_transformer.yaml):
#   8 download the LM corpus (OpenSLR 11 librispeech-lm-norm.txt.gz, resumable, MD5-checked; or --lm-text FILE)
#   9 LM training on it plus the training transcripts   -> exp/<lm-exp>/ (an LM directory)
#  10 LM perplexity on the dev and test sets             -> exp/<lm-exp>/ppl_<set>.json
#  11 decoding of the test sets with the LM (--lm-weight, default 0.6) -> exp/<exp>/avg<N>/decode_lm_<set>/
#  12 scoring with the LM; RESULTS.md shows every set without and with the LM
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/../stages.sh"

corpus_dir=$here/downloads
mirror=""
train_set=train-clean-100
dev_set=dev-clean
test_sets="dev-clean dev-other test-clean test-other"
config=""
exp=""
ngpu=$(command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | wc -l || echo 0)
vocab_size=5000       # unigram 5000 as in ESPnet's librispeech_100 and the 960 h recipes
num_avg=""           # default 10 (--whisper: 5, the checkpoints its config keeps)
beam_size=""         # default 10 (--whisper: 5, Whisper's)
ctc_weight=0.3
use_lm=false
lm_config=""
lm_text=""            # the LM corpus if already on disk (else stage 8 downloads it into --corpus-dir)
lm_mirror=""
lm_md5=""
lm_weight=0.6
lm_sets=()
train_sets=()
whisper=""            # a published Whisper to fine-tune instead of training from scratch
whisper_tokenizer=""
while (( $# )); do
  if parse_common_flag "$@"; then shift "$shift_by"; continue; fi
  case "$1" in
    --corpus-dir) corpus_dir=$(realpath -m "$2"); shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --train-set) train_set=$2; shift 2 ;;
    --dev-set) dev_set=$2; shift 2 ;;
    --test-sets) test_sets=$2; shift 2 ;;
    --config) config=$(realpath "$2"); shift 2 ;;
    --exp) exp=$2; shift 2 ;;
    --ngpu) ngpu=$2; shift 2 ;;
    --vocab-size) vocab_size=$2; shift 2 ;;
    --num-avg) num_avg=$2; shift 2 ;;
    --beam-size) beam_size=$2; shift 2 ;;
    --whisper) whisper=$(realpath "$2"); shift 2 ;;
    --whisper-tokenizer) whisper_tokenizer=$(realpath "$2"); shift 2 ;;
    --ctc-weight) ctc_weight=$2; shift 2 ;;
    --set) train_sets+=(--set "$2"); shift 2 ;;
    --lm) use_lm=true; shift ;;
    --lm-config) lm_config=$(realpath "$2"); shift 2 ;;
    --lm-text) lm_text=$(realpath "$2"); shift 2 ;;
    --lm-mirror) lm_mirror=$2; shift 2 ;;
    --lm-md5) lm_md5=$2; shift 2 ;;
    --lm-weight) lm_weight=$2; shift 2 ;;
    --lm-set) lm_sets+=(--set "$2"); shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case "$train_set" in
  train-960) parts="train-clean-100 train-clean-360 train-other-500"; default_config=transformer_960h.yaml ;;
  *) parts=$train_set; default_config=transformer_100h.yaml ;;
esac
if [[ -n $whisper ]]; then  # Whisper's own defaults: the fine-tuning config keeps 5 checkpoints; beam 5
  default_config=whisper_finetune.yaml
  exp=${exp:-whisper_$(basename "$whisper" .pt)_${train_set}}
  num_avg=${num_avg:-5}
  beam_size=${beam_size:-5}
  $use_lm && { echo "run.sh: --lm goes with a model of ours (a SentencePiece tokenizer), not --whisper" >&2; exit 2; }
fi
num_avg=${num_avg:-10}
beam_size=${beam_size:-10}
config=${config:-$repo/configs/librispeech/$default_config}
exp=${exp:-$(basename "$config" .yaml)_${train_set}}
cd "$here"
find_asr "$repo"
data=data
tdata=$data/$train_set
expdir=exp/$exp
model=$expdir/avg$num_avg
subsets=$(echo "$parts $dev_set $test_sets" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')

mirror_args=()
[[ -n $mirror ]] && mirror_args=(--mirror "$mirror")
run_stage 0 download "$data/.done.download" "$data/logs" -- \
  "${ASR[@]}" download librispeech --corpus-dir "$corpus_dir" --subsets $subsets "${mirror_args[@]}"

run_stage 1 manifests "$data/.done.manifests" "$data/logs" -- \
  "${ASR[@]}" prepare librispeech --corpus-dir "$corpus_dir" --subsets $subsets --out "$data"
if [[ $train_set == train-960 && ! -f $data/train-960.jsonl ]] && (( stage <= 1 && stop_stage >= 1 )); then
  cat "$data/train-clean-100.jsonl" "$data/train-clean-360.jsonl" "$data/train-other-500.jsonl" \
    >"$data/train-960.jsonl.tmp" && mv "$data/train-960.jsonl.tmp" "$data/train-960.jsonl"
fi

if [[ -n $whisper ]]; then
  base=exp/$(basename "$whisper" .pt)
  tok_args=()
  [[ -n $whisper_tokenizer ]] && tok_args=(--tokenizer "$whisper_tokenizer")
  run_stage 3 import "$base/.done.import" "$data/logs" -- \
    "${ASR[@]}" import whisper "$whisper" --out "$base" "${tok_args[@]}"
  model_args=(--config "$base/config.yaml" --config "$config" --set train.init="$base" --set data.tokenizer="$base")
else
  run_stage 2 cmvn "$tdata/.done.cmvn" "$data/logs" -- \
    "${ASR[@]}" cmvn --manifest "$data/$train_set.jsonl" --out "$tdata/cmvn.json"

  run_stage 3 tokenizer "$tdata/.done.tokenizer" "$data/logs" -- \
    "${ASR[@]}" tokenizer --manifest "$data/$train_set.jsonl" --vocab-size "$vocab_size" --model-type unigram \
      --out "$tdata/tokenizer"
  model_args=(--config "$config" --set data.tokenizer="$tdata/tokenizer" --set data.cmvn="$tdata/cmvn.json")
fi

if (( ngpu > 1 )); then
  launcher=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$ngpu" -m asr)
else
  launcher=("${ASR[@]}")
fi
run_stage 4 train "$expdir/.done.train" "$expdir/logs" -- \
  "${launcher[@]}" train "${model_args[@]}" --out "$expdir" \
    --set data.train="$data/$train_set.jsonl" --set data.dev="$data/$dev_set.jsonl" "${train_sets[@]}"

run_stage 5 average "$model/.done.average" "$expdir/logs" -- \
  "${ASR[@]}" average --exp "$expdir" --num "$num_avg" --by best --out "$model"

device=cpu
(( ngpu > 0 )) && device=cuda
for set in $test_sets; do
  run_stage 6 "decode_$set" "$model/decode_$set/.done" "$expdir/logs" -- \
    "${ASR[@]}" decode --model "$model" --manifest "$data/$set.jsonl" --out "$model/decode_$set/hyp.jsonl" \
      --beam-size "$beam_size" --ctc-weight "$ctc_weight" --device "$device"
done

for set in $test_sets; do
  run_stage 7 "score_$set" "$model/decode_$set/.done.score" "$expdir/logs" -- \
    "${ASR[@]}" score --ref "$data/$set.jsonl" --hyp "$model/decode_$set/hyp.jsonl" \
      --report "$model/decode_$set/report.txt" --json-out "$model/decode_$set/wer.json"
done
decode_text="beam $beam_size, CTC weight $ctc_weight, average of the $num_avg best checkpoints"
if (( stage <= 7 && stop_stage >= 7 )); then
  "$PYTHON" -m asr results --exp "$expdir" --model "$model" --sets $test_sets \
    --decode "$decode_text, no LM" --title "LibriSpeech $train_set, $(basename "$config")" --out "$expdir/RESULTS.md"
  cat "$expdir/RESULTS.md"
fi
$use_lm || exit 0

# ----------------------------------------------------------------------------- language model (--lm)
lm_config=${lm_config:-$repo/configs/librispeech/lm_transformer.yaml}
lmdir=exp/$(basename "$lm_config" .yaml)_${train_set}
if [[ -z $lm_text ]]; then
  lm_text=$corpus_dir/librispeech-lm-norm.txt.gz
  lm_dl_args=()
  [[ -n $lm_mirror ]] && lm_dl_args+=(--mirror "$lm_mirror")
  [[ -n $lm_md5 ]] && lm_dl_args+=(--md5 "$lm_md5")
  run_stage 8 lm_download "$data/.done.lm_download" "$data/logs" -- \
    "${ASR[@]}" download librispeech-lm --corpus-dir "$corpus_dir" "${lm_dl_args[@]}"
fi

run_stage 9 lm_train "$lmdir/.done.train" "$lmdir/logs" -- \
  "${launcher[@]}" lm train --config "$lm_config" --text "$lm_text" "$data/$train_set.jsonl" \
    --dev "$data/$dev_set.jsonl" --tokenizer "$tdata/tokenizer" --out "$lmdir" "${lm_sets[@]}"

for set in $test_sets; do
  run_stage 10 "lm_ppl_$set" "$lmdir/.done.ppl_$set" "$lmdir/logs" -- \
    "${ASR[@]}" lm eval --model "$lmdir" --text "$data/$set.jsonl" --json-out "$lmdir/ppl_$set.json"
done

for set in $test_sets; do
  run_stage 11 "decode_lm_$set" "$model/decode_lm_$set/.done" "$expdir/logs" -- \
    "${ASR[@]}" decode --model "$model" --manifest "$data/$set.jsonl" --out "$model/decode_lm_$set/hyp.jsonl" \
      --beam-size "$beam_size" --ctc-weight "$ctc_weight" --lm "$lmdir" --lm-weight "$lm_weight" --device "$device"
done

for set in $test_sets; do
  run_stage 12 "score_lm_$set" "$model/decode_lm_$set/.done.score" "$expdir/logs" -- \
    "${ASR[@]}" score --ref "$data/$set.jsonl" --hyp "$model/decode_lm_$set/hyp.jsonl" \
      --report "$model/decode_lm_$set/report.txt" --json-out "$model/decode_lm_$set/wer.json"
done
if (( stage <= 12 && stop_stage >= 12 )); then
  "$PYTHON" -m asr results --exp "$expdir" --model "$model" --sets $test_sets \
    --decode "$decode_text, no LM" --lm "$lmdir" --lm-decode "$decode_text, LM weight $lm_weight ($lmdir)" \
    --title "LibriSpeech $train_set, $(basename "$config")" --out "$expdir/RESULTS.md"
  cat "$expdir/RESULTS.md"
fi
