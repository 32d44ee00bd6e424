"""Inclusive shares of functions in py-spy raw files: python shares.py Ingress.txt StatsBoard.txt"""

import sys
from collections import Counter

for path in sys.argv[1:]:
    total, inclusive = 0, Counter()
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        stack, _, n = line.rstrip().rpartition(" ")
        total += int(n)
        for name in {frame.split(" (")[0] for frame in stack.split(";")}:
            inclusive[name] += int(n)
    print(f"{path}: {total} samples at 200/s over 30 s = {100 * total / 6000:.1f}% of a core")
    for name, n in inclusive.most_common(25):
        print(f"  {100 * n / total:5.1f}% {name[:110]}")
