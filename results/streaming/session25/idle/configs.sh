#!/bin/bash
# configs/emulated-h200.yaml with 1 and with 4 ingress replicas, into DIR (default /tmp/s25/idle).
D=${1:-/tmp/s25/idle}; mkdir -p "$D"
for n in 1 4; do python3 -c "
s = open('configs/emulated-h200.yaml').read()
open('$D/ing$n.yaml', 'w').write(s.replace('    ingress:\n      num_replicas: 1', '    ingress:\n      num_replicas: $n'))"; done
