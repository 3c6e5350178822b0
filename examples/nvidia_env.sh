# Sourced by the GPU scripts: select NVIDIA's Vulkan driver as NVIDIA's container images lay
# it out (the ICD manifest nvidia_icd.json in /usr/share/vulkan/icd.d or /etc/vulkan/icd.d,
# libvulkan.so.1 from the system), so that lavapipe cannot answer in its place, and pick
# the Python to run (PYTHON, else the repository's .venv, else python3).
# Sets: here, python, icd, VK_DRIVER_FILES, VK_ICD_FILENAMES, VKCORE_DEVICE (and, with
# .gpu-carry/, PATH, LD_LIBRARY_PATH, the layer path and PYTHONPATH).

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$here/.venv/bin/python" ]; then python="$here/.venv/bin/python"; else python=python3; fi
fi

# GPU_CHECK_ICD names another driver's manifest (a dry run of these scripts elsewhere).
icd="${GPU_CHECK_ICD:-}"
for candidate in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json \
  /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
  if [ -z "$icd" ] && [ -f "$candidate" ]; then icd="$candidate"; fi
done
if [ -z "$icd" ]; then
  echo "$(basename "$0"): no nvidia_icd.json in /usr/share/vulkan/icd.d, /etc/vulkan/icd.d or /usr/local/nvidia/share/vulkan/icd.d;" >&2
  echo "  in a container, expose the graphics capability (NVIDIA_DRIVER_CAPABILITIES=...,graphics)" >&2
  exit 1
fi
# A machine without network access: what examples/gpu_carry.sh prepared (Debian's loader,
# validation layer and glslang unpacked beside the repository, the Vulkan binding
# installed into .gpu-carry/site), used where the Python has no `vulkan`.
carry="$here/.gpu-carry"
if [ -d "$carry/wheels" ] && ! "$python" -c "import vulkan" 2>/dev/null; then
  root="$carry/root"
  if [ ! -d "$root" ]; then
    for deb in "$carry"/debs/*.deb; do dpkg -x "$deb" "$root"; done
  fi
  if [ ! -d "$carry/site" ]; then
    "$python" -m pip install -q --no-index --no-deps --find-links "$carry/wheels" \
      --target "$carry/site" vulkan cffi pycparser ||
      { echo "$(basename "$0"): installing the carried wheels failed" >&2; exit 1; }
  fi
  lib="$root/usr/lib/x86_64-linux-gnu"
  export PATH="$root/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export VK_ADD_LAYER_PATH="$root/usr/share/vulkan/explicit_layer.d" VK_LAYER_PATH="$root/usr/share/vulkan/explicit_layer.d"
  export PYTHONPATH="$here:$carry/site${PYTHONPATH:+:$PYTHONPATH}"
fi
ldconfig_bin="$(command -v ldconfig || echo /sbin/ldconfig)"
if [ -x "$ldconfig_bin" ] && ! "$ldconfig_bin" -p | grep -q 'libvulkan\.so\.1' &&
  [ ! -e "${lib:-/nonexistent}/libvulkan.so.1" ]; then
  echo "$(basename "$0"): the Vulkan loader libvulkan.so.1 is missing (Debian/Ubuntu: apt-get install libvulkan1)" >&2
  exit 1
fi
# VK_DRIVER_FILES is the loader's name since 1.3.207, VK_ICD_FILENAMES the older one.
export VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd"
export VKCORE_DEVICE="${VKCORE_DEVICE:-nvidia}"
