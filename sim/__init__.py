"""A discrete-event simulator of the serving system at cluster scale.

It drives the project's own router (``router.route``, ``router.LatencyModel``) and autoscaling policy
(``router.autoscaling`` through ``router.serve_autoscaling``) against engine performance models
(:mod:`engines.profile`), and writes the bench's records, summary, plots and report. ``python -m sim``
runs the built-in 64-GPU scenario; ``python -m sim calibrate`` checks a profile against a real run.
"""
