#!/usr/bin/env bash
# The whole check on an NVIDIA GPU, in about 8 minutes: the test suite on the GPU with the
# driver asserted, `vkcore bench --json`, `vkcore coldwarm --json` and `vkcore tune`, every
# result with the driver version in one folder, gpu-check-<date>/ (or $1).
#
#   examples/gpu_check.sh [folder]        (or: make gpu-check)
#
# Each step has its own time limit and its exit status is recorded in status.txt; a failing
# step does not stop the others. Caches go to a temporary folder inside the result folder.
set -uo pipefail
# shellcheck source=examples/nvidia_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/nvidia_env.sh" || exit 1

out="${1:-gpu-check-$(date -u +%Y%m%dT%H%MZ)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export VKCORE_CACHE_DIR="$out/cache"
: > "$out/status.txt"

step() {  # step NAME SECONDS FILE COMMAND...: run with a limit, output to FILE, record status
  local name="$1" limit="$2" file="$3"
  shift 3
  local start=$SECONDS
  timeout "$limit" "$@" > "$out/$file" 2> "$out/$name.stderr"
  local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - start))" | tee -a "$out/status.txt"
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  echo "icd $icd"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} > "$out/environment.txt" 2>&1
step info 60 info.json "$python" -m vkcore info --json
cd "$here" || exit 1
step tests 300 tests.txt env VKCORE_EXPECT_DRIVER=nvidia VKCORE_VALIDATION=1 \
  "$python" -m pytest -q -p no:cacheprovider -m "not soak"
step bench 120 bench.json "$python" -m vkcore bench --json --no-progress
step coldwarm 90 coldwarm.json "$python" -m vkcore coldwarm --json --max-seconds 60
step tune 60 tune.txt "$python" -m vkcore tune
echo "gpu_check: results in $out"
! grep -qv ' rc=0 ' "$out/status.txt"
