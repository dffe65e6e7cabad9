#!/usr/bin/env bash
# Connected digits on real speech (Free Spoken Digit Dataset), trained on CPU in minutes.
#
#   bash recipes/fsdd/run.sh [--corpus-dir DIR] [--download] [--stage N] [--stop-stage M] [--force]
#       [--set KEY=VALUE ...] [--test-speakers "S ..."] [--mode M] [--beam-size N] [--ctc-weight W]
#       [--speed F | --speeds F,F,...]
#       [--exp NAME] [--config YAML] [--num-train N] [--num-dev N] [--num-test N] [--trim-prob P] [--data DIR]
#       [--tts-voices N] [--tts-share P] [--seed N] [--adapt N] [--adapt-set KEY=VALUE ...]
#
# --seed N: the seed of every random draw: the utterances (asr prepare fsdd --seed N) and, unless N is
# 0, the training (train.seed=N: initialisation, batches, augmentation; 0 keeps the config's seed).
# The recordings: by default the 2,500 bundled with the repository (corpus/fsdd, no network needed);
# --corpus-dir DIR: a folder of your own FSDD recordings (DIR/recordings/ or DIR itself);
# --download: FSDD's pinned upstream commit, fetched into downloads/fsdd (or --corpus-dir DIR) and
# checked recording by recording (SHA-256) before anything is extracted.
# Synthetic speakers: --tts-voices N espeak-ng voices (synthesised once into data_tts_voices/, shared
# by every run; 0: none) speak a share --tts-share P of the training utterances (asr.corpora.fsdd_tts).
#
# Stages (each one `asr` command, each skipped when already done):
#   0 the corpus: check its SHA256SUMS (named errors), or download it with --download
#   1 connected-digit utterances with speaker-disjoint splits  -> data/{train,dev,test}.jsonl
#     (first, once: the synthetic speakers' takes                 -> data_tts_voices/)
#   2 global CMVN statistics                                   -> data/cmvn.json
#   3 SentencePiece tokenizer (one piece per digit word)        -> data/tokenizer/
#   4 training                                                  -> exp/<exp>/ (a model directory)
#   5 checkpoint averaging                                      -> exp/<exp>/avg<N>/
#   6 decoding of dev (training speakers' held-out takes) and test (an unseen speaker); with a decoder,
#     also by CTC alone; then --adapt N rounds (default 2) of unsupervised adaptation to the unseen
#     speaker: the test set's own hypotheses become its transcripts (asr pseudo-label; no reference is
#     read), the model is fine-tuned on them from its own weights (10 epochs at a constant 5e-4;
#     --adapt-set KEY=VALUE changes it), the last N checkpoints are averaged, the test set is decoded
#     again                                -> exp/<exp>/avg<N>/adapt/avg<N>/ (round 2: .../adapt/avg<N>/adapt/avg<N>/)
#   7 scoring                                                   -> exp/<exp>/RESULTS.md
#   8 `asr transcribe` of one held-out test utterance
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/../stages.sh"

corpus_dir=""          # default: $repo/corpus/fsdd, or downloads/fsdd with --download
fetch=false
config=$repo/configs/fsdd/transformer.yaml
exp=transformer
test_speakers=""      # default: the last speaker in sorted order (yweweler in corpus/fsdd)
seed=0
vocab_size=29         # <blank> <unk> <sos/eos>, the 10 digit words, and the letters
num_avg=5
decode_args=()       # --mode/--beam-size/--ctc-weight/--speed/--speeds: default the config's decode section
prepare_args=()       # --num-train/--num-dev/--num-test (utterances per split), --trim-prob: to `asr prepare fsdd`
train_sets=()
tts_voices=100        # synthetic training speakers (espeak-ng), 0: none (README, FSDD: unseen-speaker WER)
tts_share=0.4         # share of the training utterances they speak
adapt=2               # rounds of unsupervised adaptation to the test speaker (0: none; NOTES.md: 1 -> 2 -> 3
                      # rounds, mean over the five speakers 7.85 -> 6.89 -> 6.82%)
adapt_sets=(--set train.epochs=10 --set train.scheduler=constant --set train.lr=0.0005 --set train.warmup_steps=0
            --set train.keep_best=0 --set 'data.dev=""')  # fine-tuning: the last checkpoints are averaged, no dev set
data=data             # prepared data (relative to this folder): one per choice of test speakers
while (( $# )); do
  if parse_common_flag "$@"; then shift "$shift_by"; continue; fi
  case "$1" in
    --corpus-dir) corpus_dir=$(realpath -m "$2"); shift 2 ;;
    --download) fetch=true; shift ;;
    --config) config=$(realpath "$2"); shift 2 ;;
    --exp) exp=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --test-speakers) test_speakers=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --vocab-size) vocab_size=$2; shift 2 ;;
    --num-avg) num_avg=$2; shift 2 ;;
    --mode|--beam-size|--ctc-weight|--speed|--speeds) decode_args+=("$1" "$2"); shift 2 ;;
    --num-train|--num-dev|--num-test|--trim-prob) prepare_args+=("$1" "$2"); shift 2 ;;
    --tts-voices) tts_voices=$2; shift 2 ;;
    --tts-share) tts_share=$2; shift 2 ;;
    --adapt) adapt=$2; shift 2 ;;
    --adapt-set) adapt_sets+=(--set "$2"); shift 2 ;;
    --set) train_sets+=(--set "$2"); shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $adapt =~ ^[0-9]+$ ]] || { echo "run.sh: --adapt expects a number of rounds (0: none), got '$adapt'" >&2; exit 2; }
(( seed == 0 )) || train_sets=(--set "train.seed=$seed" "${train_sets[@]}")  # a --set of the user's wins
if [[ -z $corpus_dir ]]; then
  if $fetch; then corpus_dir=$here/downloads/fsdd; else corpus_dir=$repo/corpus/fsdd; fi
fi
fetch_args=(--no-fetch)
$fetch && fetch_args=()
cd "$here"
find_asr "$repo"
expdir=exp/$exp
model=$expdir/avg$num_avg

run_stage 0 corpus "$data/.done.corpus" "$data/logs" -- \
  "${ASR[@]}" download fsdd --corpus-dir "$corpus_dir" "${fetch_args[@]}"

speaker_args=()
[[ -n $test_speakers ]] && speaker_args=(--test-speakers $test_speakers)
(( tts_voices > 0 )) && prepare_args+=(--tts-dir "$here/data_tts_voices" --tts-voices "$tts_voices" --tts-share "$tts_share")
run_stage 1 prepare "$data/.done.prepare" "$data/logs" -- \
  "${ASR[@]}" prepare fsdd --corpus-dir "$corpus_dir" --out "$data" --seed "$seed" "${speaker_args[@]}" "${prepare_args[@]}"

run_stage 2 cmvn "$data/.done.cmvn" "$data/logs" -- \
  "${ASR[@]}" cmvn --manifest "$data/train.jsonl" --config "$config" --out "$data/cmvn.json"

run_stage 3 tokenizer "$data/.done.tokenizer" "$data/logs" -- \
  "${ASR[@]}" tokenizer --manifest "$data/train.jsonl" --vocab-size "$vocab_size" --model-type unigram \
    --out "$data/tokenizer"

run_stage 4 train "$expdir/.done.train" "$expdir/logs" -- \
  "${ASR[@]}" train --config "$config" --out "$expdir" \
    --set data.train="$data/train.jsonl" --set data.dev="$data/dev.jsonl" \
    --set data.tokenizer="$data/tokenizer" --set data.cmvn="$data/cmvn.json" "${train_sets[@]}"

run_stage 5 average "$model/.done.average" "$expdir/logs" -- \
  "${ASR[@]}" average --exp "$expdir" --num "$num_avg" --by best --out "$model"

# The decoding: the model config's, with this run's --mode/--beam-size/--ctc-weight on top. A model with
# a decoder is decoded a second time by CTC alone (the same network without its decoder: decode_ctc_<set>),
# reported beside.
variants=(decode)
if (( stage <= 7 && stop_stage >= 6 )); then
  overrides=()
  for ((i = 0; i < ${#decode_args[@]}; i += 2)); do
    key=${decode_args[i]#--}; value=${decode_args[i + 1]}
    case $key in  # as asr decode takes them: one speed replaces an ensemble, an ensemble one speed
      speed) overrides+=("decode.speed=$value" "decode.speeds=[]") ;;
      speeds) overrides+=("decode.speeds=[$value]" "decode.speed=1.0") ;;
      *) overrides+=("decode.${key//-/_}=$value") ;;
    esac
  done
  IFS='|' read -r mode beam decoding played < <("$PYTHON" -c 'import sys; from asr.config import load_config
d = load_config(sys.argv[1], sys.argv[2:]).decode
played = "" if d.speed == 1 else f", audio played {d.speed:g}x as fast (decode.speed)"
if d.speeds:
    played = ", audio played at " + ", ".join(f"{f:g}x" for f in d.speeds) + " and combined on hypotheses (decode.speeds)"
print(d.mode, d.beam_size, f"{d.mode}, beam {d.beam_size}" + ("" if d.mode.startswith("ctc") else f", CTC weight {d.ctc_weight}")
      + played, played, sep="|")' \
    "$model/config.yaml" "${overrides[@]}")
  [[ $mode == ctc_* ]] || variants+=(decode_ctc)
fi
decode_set() {  # decode_set STAGE_NAME MODEL VARIANT SET: stage 6 -> MODEL/VARIANT_SET/hyp.jsonl
  local m=$2 v=$3 set=$4 args=("${decode_args[@]}")
  [[ $v == decode_ctc ]] && args+=(--mode ctc_beam --beam-size "$beam")  # the last of a repeated option counts
  run_stage 6 "$1" "$m/${v}_$set/.done" "$expdir/logs" -- \
    "${ASR[@]}" decode --model "$m" --manifest "$data/$set.jsonl" --out "$m/${v}_$set/hyp.jsonl" "${args[@]}"
}
score_set() {  # score_set STAGE_NAME MODEL VARIANT SET: stage 7 -> MODEL/VARIANT_SET/{wer.json,report.txt}
  local m=$2 v=$3 set=$4
  run_stage 7 "$1" "$m/${v}_$set/.done.score" "$expdir/logs" -- \
    "${ASR[@]}" score --ref "$data/$set.jsonl" --hyp "$m/${v}_$set/hyp.jsonl" \
      --report "$m/${v}_$set/report.txt" --json-out "$m/${v}_$set/wer.json"
}
for set in dev test; do
  for v in "${variants[@]}"; do
    decode_set "${v}_$set" "$model" "$v" "$set"
  done
done

# Unsupervised adaptation to the unseen speaker (asr.data.pseudo_label), --adapt rounds: each nests in the
# model it adapts (MODEL/adapt: the fine-tuning, MODEL/adapt/avgN: the adapted model, decoded again).
round_variants() {  # round_variants R: the decodings of round R; one before the last: only what the next learns from
  if (( $1 < adapt )); then echo decode; else echo "${variants[@]}"; fi
}
adapted=()  # the adapted models, round by round
src=$model
for ((r = 1; r <= adapt; r++)); do
  dst=$src/adapt
  run_stage 6 "pseudo_label$r" "$src/decode_test/.done.pseudo" "$expdir/logs" -- \
    "${ASR[@]}" pseudo-label --manifest "$data/test.jsonl" --hyp "$src/decode_test/hyp.jsonl" \
      --out "$src/decode_test/pseudo.jsonl"
  run_stage 6 "adapt$r" "$dst/.done.train" "$expdir/logs" -- \
    "${ASR[@]}" train --config "$src/config.yaml" --out "$dst" --set train.init="$src" \
      --set data.train="$src/decode_test/pseudo.jsonl" --set data.tokenizer="$data/tokenizer" \
      --set data.cmvn="$data/cmvn.json" --set train.keep_last="$num_avg" "${adapt_sets[@]}"
  run_stage 6 "adapt${r}_average" "$dst/avg$num_avg/.done.average" "$expdir/logs" -- \
    "${ASR[@]}" average --exp "$dst" --num "$num_avg" --by last --out "$dst/avg$num_avg"
  src=$dst/avg$num_avg
  adapted+=("$src")
  for v in $(round_variants "$r"); do
    decode_set "adapt${r}_${v}_test" "$src" "$v" test
  done
done

for set in dev test; do
  for v in "${variants[@]}"; do
    score_set "${v/decode/score}_$set" "$model" "$v" "$set"
  done
done
for ((r = 1; r <= ${#adapted[@]}; r++)); do
  m=${adapted[r - 1]}
  for v in $(round_variants "$r"); do
    score_set "adapt${r}_${v/decode/score}_test" "$m" "$v" test
  done
done
if (( stage <= 7 && stop_stage >= 7 )); then
  also=()
  [[ ${#variants[@]} == 2 ]] && also=(--also decode_ctc "CTC only" "ctc_beam, beam $beam$played: the same model without its decoder")
  if (( adapt > 0 )); then
    rel=${adapted[-1]#"$model/"}
    how="the model adapted to the test speaker ($adapt round(s) of fine-tuning on its own hypotheses of the test set; asr pseudo-label)"
    also+=(--also-for test "$rel/decode" adapted "$decoding, $how")
    [[ ${#variants[@]} == 2 ]] && also+=(--also-for test "$rel/decode_ctc" "adapted, CTC only" "ctc_beam, beam $beam$played, $how")
  fi
  "$PYTHON" -m asr results --exp "$expdir" --model "$model" --sets dev test "${also[@]}" \
    --decode "$decoding, average of the $num_avg best checkpoints" \
    --title "FSDD connected digits, $(basename "$config")" --out "$expdir/RESULTS.md"
  cat "$expdir/RESULTS.md"
fi

if (( stage <= 8 && stop_stage >= 8 )); then
  wav=$("$PYTHON" -c 'import json,sys,os; r=json.loads(open(sys.argv[1]).readline()); print(os.path.join(os.path.dirname(sys.argv[1]), r["audio"]))' "$data/test.jsonl")
  echo "stage 8 (transcribe): asr transcribe $wav --model $model"
  "${ASR[@]}" transcribe "$wav" --model "$model" "${decode_args[@]}"
  echo "reference: $(head -n 1 "$data/test.jsonl" | "$PYTHON" -c 'import json,sys; print(json.loads(sys.stdin.read())["text"])')"
fi
