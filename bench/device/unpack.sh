# On the H200 machine, from the repository root: `. bench/device/unpack.sh` (sourced: it exports the paths).
# Unpacks what bench/device/pack.sh carried into /tmp/site and /tmp/pyspy.
mkdir -p /tmp/site
tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz
tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .device/pyspy/*.whl 2>&1 | tail -2
export PATH=/tmp/pyspy/bin:$PATH PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
