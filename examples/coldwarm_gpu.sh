#!/usr/bin/env bash
# Cold vs warm pipeline creation on an NVIDIA GPU, laid out as in NVIDIA's container images
# (nvidia/cuda, nvidia/vulkan): the driver's Vulkan ICD manifest in /usr/share/vulkan/icd.d
# or /etc/vulkan/icd.d, libvulkan.so.1 (the loader) from the system.
#
#   examples/coldwarm_gpu.sh [extra vkcore coldwarm options, e.g. --repeats 5]
#
# Writes coldwarm-gpu-<date>.json (every sample and the environment), .txt (the table and
# the findings) and .png (when matplotlib is installed) in the current folder. Caches go to
# temporary folders that the command removes; your own cache folders are not touched.
# In a container, run it with the GPU and its graphics capability exposed, for example
#   docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics ...
set -euo pipefail

# shellcheck source=examples/nvidia_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/nvidia_env.sh"

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
fi
"$python" -m vkcore info

stamp="$(date -u +%Y%m%dT%H%MZ)"
out="coldwarm-gpu-$stamp"
plot=()
if "$python" -c 'import matplotlib' 2>/dev/null; then plot=(--plot "$out.png"); fi
# One measurement, two views: JSON for the record, then the table rendered from it.
"$python" -m vkcore coldwarm --json "${plot[@]}" "$@" > "$out.json"
"$python" - "$out.json" <<'EOF' | tee "$out.txt"
import json, sys
from vkcore.tools import coldwarm
print(coldwarm.format_report(json.load(open(sys.argv[1]))))
EOF
echo "coldwarm_gpu: wrote $out.json $out.txt ${plot[1]:-}"
