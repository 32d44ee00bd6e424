#!/usr/bin/env bash
# Packs what a bench on the lent H200 machine needs and its image lacks, small enough to carry beside the tree
# (the device's carry limit is 64 MiB, the tree included):
#   .device/ray-site-stripped.tar.xz   ray[serve] 2.60 and its missing deps for Python 3.12, debug symbols stripped
#   .device/transformers-trim.tar.xz   transformers 5.24 (the image has 5.17) with only the models the benches use
#   .device/pyspy/*.whl                py-spy, for `bench overhead --profile`
# usage (from the repository root): bash bench/device/pack.sh      then carry .device/ in the device run.
# On the device: bash bench/device/unpack.sh (sets up /tmp/site; source it for PYTHONPATH and PATH).
set -euo pipefail
out=.device
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ! -f "$out/ray-site-stripped.tar.xz" ]; then
  bash ../shared/tools/pack-ray-for-device.sh 2.60.0 "$work/pack"
  mkdir -p "$work/site" && tar -C "$work/site" -xJf "$work/pack/ray-site.tar.xz"
  find "$work/site" -name '*.so*' -type f -exec strip --strip-debug {} + 2>/dev/null || true
  tar -C "$work/site" -cf - . | xz -9 -T0 > "$out/ray-site-stripped.tar.xz"
fi
if [ ! -f "$out/transformers-trim.tar.xz" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$work/tf" transformers==5.24.0
  mkdir -p "$work/tfsite" && unzip -q "$work"/tf/*.whl -d "$work/tfsite"
  models="$work/tfsite/transformers/models"
  for d in "$models"/*/; do
    case "$(basename "$d")" in llama|auto|encoder_decoder) ;; *) rm -rf "$d" ;; esac
  done
  tar -C "$work/tfsite" -cf - . | xz -9 -T0 > "$out/transformers-trim.tar.xz"
fi
if ! ls "$out"/pyspy/*.whl > /dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --python-version 3.12 -d "$out/pyspy" py-spy
fi
ls -la "$out" "$out/pyspy"
