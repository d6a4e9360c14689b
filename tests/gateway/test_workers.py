"""The parked binding threads (kernelgate/gateway/workers.py): a thread takes the next
job handed to it while it parks, more jobs at once get threads of their own, and an
executor that is shut down takes no new thread."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest

from kernelgate.gateway.workers import Workers, workers_for


def test_one_set_of_workers_per_executor() -> None:
    with ThreadPoolExecutor(2) as a, ThreadPoolExecutor(2) as b:
        assert workers_for(a) is workers_for(a)
        assert workers_for(a) is not workers_for(b)


def test_jobs_at_once_run_in_threads_of_their_own() -> None:
    barrier = threading.Barrier(3, timeout=10)
    met = threading.Semaphore(0)

    def job() -> None:
        barrier.wait()
        met.release()

    with ThreadPoolExecutor(4, thread_name_prefix="kernelgate-test") as ex:
        workers = Workers(ex)
        for _ in range(3):
            workers.submit(job)
        for _ in range(3):
            assert met.acquire(timeout=10)


def test_a_job_that_raises_does_not_end_its_thread_for_good() -> None:
    ran = threading.Event()

    def bad() -> None:
        raise RuntimeError("a job's own error")

    with ThreadPoolExecutor(1, thread_name_prefix="kernelgate-test") as ex:
        workers = Workers(ex)
        workers.submit(bad)
        workers.submit(ran.set)
        assert ran.wait(10)


def test_a_shut_down_executor_takes_no_new_thread() -> None:
    ex = ThreadPoolExecutor(1, thread_name_prefix="kernelgate-test")
    ex.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        Workers(ex).submit(lambda: None)


@pytest.mark.timeout(30)
def test_workers_go_by_reference_counting_once_their_executor_has() -> None:
    # A gateway's binding threads are freed with it, not at the next collection.
    gc.collect()
    gc.disable()
    try:
        ex = ThreadPoolExecutor(1)
        workers = workers_for(ex)
        done = threading.Event()
        workers.lane().submit(done.set)
        assert done.wait(5)
        gone = weakref.ref(workers)
        del workers
        ex.shutdown(wait=True)  # the parked thread leaves within IDLE_S
        del ex
        assert gone() is None
    finally:
        gc.enable()
