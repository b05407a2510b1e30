#!/usr/bin/env bash
# sglang-batching.sh: SGLang's batch formation against vLLM's for the paper's SGLang baselines
# (issue 16 item 3). Runs lpm, dfs-weight and fcfs (stop: always) under serving.engine vllm and
# sglang on the decode-tokens experiment (output 10, 50, 200 tokens at 100 req/s) and the
# request-rate experiment (10 and 100 req/s, 200 output tokens), 3000 requests each, scheduler
# time zero (the comparison is of batch formation alone; the runs are deterministic), and prints
# a markdown table of mean batch size, mean decode batch (steps without prefill work), mean
# requests per prefill step, throughput and mean TBT from the runs' summary.json and results.h5.
#   scripts/sglang-batching.sh [BUILD_DIR] [PROFILE] [MAX_NUM_SEQS]
#   (defaults build/release, rtx6000-ada, the scenarios' serving.max_num_seqs: 500, the paper's)
# Each run leaves out/sglang-batching/<profile>[-seqsN]/<setting>/<engine>/<selector>/.
set -euo pipefail
cd "$(dirname "$0")/.."
feather="${1:-build/release}/feather"
profile="${2:-rtx6000-ada}"
max_seqs="${3:-}"
root="out/sglang-batching/$profile${max_seqs:+-seqs$max_seqs}"
seqs=()
[[ -n $max_seqs ]] && seqs=(--set serving.max_num_seqs="$max_seqs")
settings=("decode-tokens out10 workload.output_tokens=10"
          "decode-tokens out50 workload.output_tokens=50"
          "decode-tokens out200 workload.output_tokens=200"
          "request-rate rate10 workload.arrival.rate=10"
          "request-rate rate100 workload.arrival.rate=100")
for setting in "${settings[@]}"; do
  set -- $setting
  for engine in vllm sglang; do
    for selector in lpm dfs-weight fcfs; do
      out="$root/$2/$engine/$selector"
      [[ -f "$out/summary.json" ]] && continue   # resumable
      echo "run $profile $2 $engine $selector" >&2
      "$feather" run "scenarios/experiments/$1.yaml" --out "$out" --set profile="$profile" \
        --set workload.requests=3000 --set "$3" --set scheduler_time=zero \
        --set scheduler.selector="$selector" --set scheduler.stop=always \
        --set serving.engine="$engine" "${seqs[@]}" > /dev/null
    done
  done
done
# The table reads results.h5 with h5py (the project's venv has it; scripts/python-env.sh).
py="${FEATHER_PYTHON:-$HOME/.cache/feather/venv/bin/python}"
[[ -x $py ]] || py=python3
"$py" - "$root" <<'PY'
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
try:
    import h5py
except ImportError:
    h5py = None
def decode_stats(run):
    """Mean batch of steps without prefill work, and mean requests per step that admitted any."""
    if h5py is None:
        return float("nan"), float("nan")
    with h5py.File(run / "results.h5") as f:
        steps = f["steps"]
        batch, prefill, admitted = steps["batch_size"][:], steps["prefill_tokens"][:], steps["admitted"][:]
    dec = batch[prefill == 0]
    adm = admitted[admitted > 0]
    return (dec.mean() if len(dec) else 0.0), (adm.mean() if len(adm) else 0.0)
print(f"| setting | selector | engine | mean batch | decode batch | admitted/prefill step "
      f"| throughput tok/s | mean TBT ms |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
for setting in ["out10", "out50", "out200", "rate10", "rate100"]:
    for selector in ["lpm", "dfs-weight", "fcfs"]:
        for engine in ["vllm", "sglang"]:
            run = root / setting / engine / selector
            s = json.loads((run / "summary.json").read_text())
            dec, adm = decode_stats(run)
            print(f"| {setting} | {selector} | {engine} | {s['mean_batch_size']:.1f} | {dec:.1f} "
                  f"| {adm:.2f} | {s['throughput_tok_s']:.0f} | {s['mean_tbt_ms']:.1f} |")
PY
