"""The traffic of a run and what became of it, shared by the bench (real requests) and the simulator.

Workloads (lengths, SLO tiers, prompts, prompts that share prefixes as segments), arrival processes and traces
(Mooncake's among them) say what is sent and when; request records, summaries, replica samples, plots and the report
say what happened; the routing sweep's points and its target score it. Neither ``bench`` nor ``sim`` owns these: the
simulator must not import the bench (``tests/test_import_graph.py``).
"""
