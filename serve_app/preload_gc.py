"""Imported last by a warm Ray worker (``RAY_preload_python_modules``, bench/spike.py ``warm_pool_env``): moves what
the preloaded imports allocated into the permanent generation, so that the ``gc.collect()`` + ``gc.freeze()`` Serve
runs when a replica has started (``RAY_SERVE_FREEZE_GC_ON_STARTUP``, between the constructor and the first health
check) scans only the replica's own objects instead of all of Ray, Serve and the app."""

import gc

gc.collect()
gc.freeze()
