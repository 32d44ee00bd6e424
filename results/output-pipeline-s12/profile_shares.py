"""Shares of the direct path's py-spy samples (set2-profiled) by part: the generation thread, the event loop and,
inside it, the hf stream, the output pipeline, the detokenizer and coalescing."""

import re
from pathlib import Path

PARTS = {
    "generation thread": r"_run_generation_loop",
    "event loop": r"Runner\.run \(",
    "hf _stream": r"_stream \([^)]*/hf\.py",
    "output pipeline": r"(from_ids|from_text) \([^)]*/output\.py|feed \([^)]*/output_text\.py",
    "detokenizer": r"detokenizer\.py",
    "coalesce": r"coalesce\.py",
}
for d in sorted(Path(__file__).parent.glob("set2-profiled/prof-*")):
    total, counts = 0, dict.fromkeys(PARTS, 0)
    for line in (d / "direct-c16-bench.txt").read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        total += int(n)
        for part, pattern in PARTS.items():
            if re.search(pattern, stack):
                counts[part] += int(n)
    print(f"{d.name}: {total} samples; " + ", ".join(f"{p} {100 * c / total:.1f}%" for p, c in counts.items()))
