#!/usr/bin/env bash
# Prepares, on a machine with network access, what the GPU check needs on a GPU machine
# that has none (no package registry, no apt): .gpu-carry/ in the repository (git ignores
# it; about 12 MiB) holding
#   wheels/  the `vulkan` binding with cffi and pycparser for CPython 3.11 to 3.13 on
#            x86-64 Linux (numpy, filelock, pytest and hypothesis are expected there);
#   debs/    Debian's Vulkan loader, validation layer, glslang and spirv-tools (the
#            checkout compiles its shaders at run time), unpacked there under
#            .gpu-carry/root.
# Then copy the repository with .gpu-carry/ to the GPU machine and run
# examples/gpu_check.sh there (nvidia_env.sh finds .gpu-carry/ and uses it).
#
#   examples/gpu_carry.sh            (run from anywhere; needs the repo's .venv: make setup,
#                                     and apt-get for the Debian packages)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$here/.gpu-carry"
python="$here/.venv/bin/python"
[ -x "$python" ] || { echo "gpu_carry: no $python; run make setup first" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/wheels" "$out/debs"

vulkan_pin="$(grep -o '"vulkan==[^"]*"' "$here/pyproject.toml" | tr -d '"')"
"$python" -m pip download -q --no-deps --dest "$out/wheels" "$vulkan_pin" pycparser
for version in 3.11 3.12 3.13; do
  "$python" -m pip download -q --no-deps --only-binary=:all: --dest "$out/wheels" \
    --implementation cp --python-version "$version" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 cffi
done
(cd "$out/debs" && apt-get download -q libvulkan1 vulkan-validationlayers glslang-tools spirv-tools)
du -sh "$out"
ls "$out/wheels" "$out/debs"
