#!/usr/bin/env bash
# Every flag with every model (one training engine): mlp, cnn, gpt and lstm x precision f32, bf16
# and f16, tiny sizes. Each combination trains with --on-nonfinite skip, --deterministic,
# --metrics and --json; is killed while writing its second checkpoint and resumed to a
# checkpoint byte-identical to the uninterrupted run's; and, with an emulated device, trains
# under --graph with --profile and replays the captured step (f16: refused when the flags are
# parsed, with the reason: loss scaling changes the step).
#   train_matrix.sh TESSERA DATA_DIR WORK_DIR [emulated]
#   TESSERA_MATRIX_MODELS="mlp cnn gpt lstm" (the default) picks the models: CTest runs the image
#   and the text models apart, each well inside a test's 120 s on a slower 2-core machine.
set -euo pipefail
tessera=$1 data=$2 work=$3 emulated=${4:-}
dir=$(mktemp -d "$work/train_matrix.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))."; done > "$dir/text"

# Each model's tiny run has two checkpoints (two epochs, or two validations) and 8 or 4 steps.
flags_of() {
  case $1 in
    mlp | cnn) echo "--model $1 --data $data --limit 256 --test-limit 128 --batch-size 64 --epochs 2" ;;
    gpt) echo "--model gpt --data $dir/text --steps 4 --eval-every 2 --layers 1 --heads 2 --dim 16 --context 16 --batch-size 4" ;;
    lstm) echo "--model lstm --data $dir/text --steps 4 --eval-every 2 --layers 1 --dim 16 --context 16 --batch-size 4" ;;
  esac
}
steps_of() { case $1 in mlp | cnn) echo 8 ;; *) echo 4 ;; esac; }
# Under --graph on the emulator (every thread a fiber) the CNN runs 2 steps: one eager, one captured and replayed.
graph_flags_of() {
  case $1 in
    cnn) echo "--model cnn --data $data --limit 64 --test-limit 32 --batch-size 32 --epochs 1" ;;
    *) flags_of "$1" ;;
  esac
}

runs=0
for model in ${TESSERA_MATRIX_MODELS:-mlp cnn gpt lstm}; do
  read -ra base <<< "$(flags_of $model)"
  for precision in f32 bf16 f16; do
    tag=$model-$precision
    common=(train "${base[@]}" --precision "$precision" --on-nonfinite skip --deterministic --quiet --backend cpu --seed 3)
    "$tessera" "${common[@]}" --checkpoint "$dir/$tag.straight" --metrics "$dir/$tag.metrics" --json "$dir/$tag.json" > "$dir/$tag.log" 2>&1 ||
      { cat "$dir/$tag.log"; fail "$tag: the run failed"; }
    [[ $(wc -l < "$dir/$tag.metrics") -eq $(steps_of $model) ]] || fail "$tag: --metrics has $(wc -l < "$dir/$tag.metrics") lines, want $(steps_of $model)"
    /usr/bin/python3 -c "import json,sys,math; j=json.load(open(sys.argv[1])); assert j['precision']==sys.argv[2] and len(j['history'])==2 and all(math.isfinite(h['test_loss']) for h in j['history']), j" \
      "$dir/$tag.json" "$precision" || fail "$tag: --json"
    if TESSERA_TEST_CRASH_IN_SAVE=2 "$tessera" "${common[@]}" --checkpoint "$dir/$tag.resumed" > /dev/null 2>&1; then
      fail "$tag: the run that should have been killed while writing its second checkpoint exited normally"
    fi
    "$tessera" "${common[@]}" --checkpoint "$dir/$tag.resumed" --resume > "$dir/$tag.resume.log" 2>&1 ||
      { cat "$dir/$tag.resume.log"; fail "$tag: --resume failed"; }
    cmp -s "$dir/$tag.straight" "$dir/$tag.resumed" || fail "$tag: the resumed run's checkpoint differs from the uninterrupted run's"
    runs=$((runs + 3))
    if [[ -n $emulated ]]; then
      read -ra graph_base <<< "$(graph_flags_of $model)"
      graph=(train "${graph_base[@]}" --precision "$precision" --backend emulated --graph --quiet --profile "$dir/$tag.trace" --json "$dir/$tag.graph.json")
      if [[ $precision == f16 ]]; then
        if "$tessera" "${graph[@]}" > "$dir/$tag.graph.log" 2>&1; then fail "$tag: --graph with f16 was not refused"; fi
        grep -q -- "--graph with --precision f16" "$dir/$tag.graph.log" || { cat "$dir/$tag.graph.log"; fail "$tag: no reason for the refusal"; }
      else
        "$tessera" "${graph[@]}" > "$dir/$tag.graph.log" 2>&1 || { cat "$dir/$tag.graph.log"; fail "$tag: --graph on emulated failed"; }
        /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert sum(h['graph_replays'] for h in j['history']) > 0, j['history']" \
          "$dir/$tag.graph.json" || fail "$tag: --graph replayed nothing"
        [[ -s $dir/$tag.trace ]] || fail "$tag: --profile wrote no trace"
      fi
      runs=$((runs + 1))
    fi
    echo "ok: $tag (skip, deterministic, metrics, json, crash + resume bit-identical${emulated:+, graph on emulated})"
  done
done
echo "train matrix: ok ($runs runs)"
