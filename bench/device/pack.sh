#!/usr/bin/env bash
# Packs what a bench on the lent H200 machine needs and its image lacks, small enough to carry beside the tree
# (the device's carry limit is 64 MiB, the tree included):
#   .device/ray-site-stripped.tar.xz   ray[serve] 2.60 and its missing deps for Python 3.12, debug symbols stripped
#   .device/transformers-trim.tar.xz   transformers 5.24 (the image has 5.17) with only the models the benches use
#   .device/py-spy.xz                  py-spy's binary, stripped, for `bench overhead --profile`
# usage (from the repository root): bash bench/device/pack.sh      then carry .device/ in the device run.
# On the device: bash bench/device/unpack.sh (sets up /tmp/site; source it for PYTHONPATH and PATH).
# The carry limit counts the whole tree: where results/ and this pack (35 MiB, less py-spy's 1.7) pass it,
# drop results/ from the index for the call and put it back after:
#   git rm -r -q --cached results && echo /results/ >> .git/info/exclude     (then the device call)
#   sed -i '\#^/results/$#d' .git/info/exclude && git reset -q results
set -euo pipefail
out=.device
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ! -f "$out/ray-site-stripped.tar.xz" ]; then
  bash ../shared/tools/pack-ray-for-device.sh 2.60.0 "$work/pack"
  mkdir -p "$work/site" && tar -C "$work/site" -xJf "$work/pack/ray-site.tar.xz"
  # Serving never loads the dashboard's web client or ray.llm; symbol tables of every ELF file (Ray's binaries and
  # extension modules keep their dynamic symbols) are a third of the pack.
  rm -rf "$work/site"/ray/dashboard/client "$work/site"/ray/llm
  find "$work/site" -type f \( -name '*.so*' -o -perm -u+x \) -exec sh -c 'file -b "$1" | grep -q ELF && strip --strip-unneeded "$1"' _ {} \; 2>/dev/null || true
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
if [ ! -f "$out/py-spy.xz" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --python-version 3.12 -d "$work/pyspy" py-spy
  unzip -q -o "$work"/pyspy/*.whl -d "$work/pyspy/x"
  bin=$(find "$work/pyspy/x" -name py-spy -type f | head -1)
  strip "$bin" && xz -9 -c "$bin" > "$out/py-spy.xz"
fi
ls -la "$out"
