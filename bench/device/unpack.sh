# On the H200 machine, from the repository root: `. bench/device/unpack.sh` (sourced: it exports the paths).
# Unpacks what bench/device/pack.sh carried into /tmp/site and /tmp/pyspy.
mkdir -p /tmp/site
tar -C /tmp/site -xJf .device/ray-site-stripped.tar.xz
tar -C /tmp/site -xJf .device/transformers-trim.tar.xz
mkdir -p /tmp/pyspy/bin && xz -dc .device/py-spy.xz > /tmp/pyspy/bin/py-spy && chmod +x /tmp/pyspy/bin/py-spy
export PATH=/tmp/pyspy/bin:$PATH PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1
