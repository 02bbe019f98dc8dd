"""The screen's cases in worker processes (``--jobs``): each case is independent (its own
inputs, oracle and sentinel-filled buffers), so the simulator, which runs one Python thread
per CUDA thread and so one core per process, screens several at once on a machine with
several cores. The rows are the same rows in the same order as a one-process run's.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Callable, List

from .._cli import usable_cores


def default_jobs(simulator: bool) -> int:
    """Worker processes for a run that names no ``--jobs``: on the simulator, the cores this
    process may run on; on a GPU, one (timings need the device to themselves)."""
    if not simulator:
        return 1
    return usable_cores()


class CasePool:
    """``submit(screen_case, spec, names, ticks=n, **kw)`` -> a future of that case's rows.

    With one job (or one case in all) each case runs here, in order, when its result is
    asked for, with ``progress`` ticking once per variant run as it does without a pool;
    with more, in ``jobs`` spawned processes (spawn, not fork: the parent may hold threads
    and a CUDA context), ticking ``ticks`` times as each case completes."""

    def __init__(self, jobs: int, progress: Callable[[], None]):
        self.jobs, self.progress = jobs, progress
        self._pool = None

    def __enter__(self):
        if self.jobs > 1:
            self._pool = ProcessPoolExecutor(max_workers=self.jobs,
                                             mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)
        return False

    def submit(self, screen_case, spec, names: List[str], *, ticks: int, **kw) -> "Future":
        if self._pool is None:
            return _Deferred(lambda: screen_case(spec, names, progress=self.progress, **kw))
        fut = self._pool.submit(screen_case, spec, names, **kw)

        def tick(_):
            for _ in range(ticks):
                self.progress()
        fut.add_done_callback(tick)
        return fut


class _Deferred:
    """A case screened in this process when its rows are first asked for."""

    def __init__(self, run):
        self._run = run

    def result(self):
        return self._run()
