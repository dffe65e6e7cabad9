# Shared by the recipes' run.sh: option parsing for the common flags and the stage runner.
# A stage runs when --stage <= N <= --stop-stage; it is skipped when its done-marker exists
# (unless --force), logs to LOGDIR/stage<N>.<name>.log, and writes the marker only on success,
# so a killed or failed stage simply runs again next time.

stage=0
stop_stage=100
force=false

# parse_common_flag ARGS...: consumes one known flag (sets $shift_by), else returns 1.
parse_common_flag() {
  case "$1" in
    --stage) stage=$2; shift_by=2 ;;
    --stop-stage) stop_stage=$2; shift_by=2 ;;
    --force) force=true; shift_by=1 ;;
    *) return 1 ;;
  esac
}

# The asr command: the repository's .venv when it exists, else whatever `asr` is on PATH.
find_asr() {
  local repo=$1
  if [[ -x "$repo/.venv/bin/asr" ]]; then
    ASR=("$repo/.venv/bin/asr")
    PYTHON="$repo/.venv/bin/python"
  else
    ASR=(asr)
    PYTHON=python3
  fi
}

# run_stage N NAME MARKER LOGDIR -- COMMAND...
run_stage() {
  local n=$1 name=$2 marker=$3 logdir=$4
  shift 5
  if (( n < stage || n > stop_stage )); then
    return 0
  fi
  if [[ -f "$marker" && $force == false ]]; then
    echo "stage $n ($name): done before, skipped (--force to redo)"
    return 0
  fi
  mkdir -p "$logdir" "$(dirname "$marker")"
  local log="$logdir/stage$n.$name.log"
  echo "stage $n ($name): $* (log: $log)"
  local t0=$SECONDS
  if ! "$@" >"$log" 2>&1; then
    echo "stage $n ($name) failed; the end of $log:" >&2
    tail -n 20 "$log" | tr '\r' '\n' | tail -n 20 >&2
    exit 1
  fi
  echo "$((SECONDS - t0))" >"$marker"
  echo "stage $n ($name): finished in $((SECONDS - t0)) s"
}
