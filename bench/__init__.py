"""GPU benchmarks (``python3 bench/attention.py``, ``python3 bench/gdn.py``); see each script."""
