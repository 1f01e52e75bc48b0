"""The chief's evaluation thread: results in order with their start times, errors handed over,
a bounded stop."""
import threading
import time

import pytest

from edgemesh_tf.engine.runtime.evaluator import Evaluator, ReplicaLocks, held_out_indices


def test_results_come_in_order_at_the_interval_and_errors_reach_the_caller():
    calls = []
    t0 = time.monotonic()
    elapsed = lambda: time.monotonic() - t0

    def evaluate(cancelled):
        calls.append(threading.current_thread().name)
        if len(calls) == 4:
            raise RuntimeError("the ps is gone")
        return 0.1 * len(calls), 1.0 / len(calls)

    ev = Evaluator(evaluate, elapsed, interval_s=0.05).start()
    deadline = time.monotonic() + 10
    got = []
    with pytest.raises(RuntimeError, match="the ps is gone"):
        while time.monotonic() < deadline:
            got += ev.results()
            time.sleep(0.01)
    assert [round(a, 1) for _, a, _ in got] == [0.1, 0.2, 0.3]
    starts = [t for t, _, _ in got]
    assert starts == sorted(starts) and all(b - a >= 0.045 for a, b in zip(starts, starts[1:]))
    assert set(calls) == {"chief-evaluator"}  # not the caller's thread
    assert ev.stop(1.0)


def test_stop_is_bounded_and_says_whether_the_thread_ended():
    release = threading.Event()
    ev = Evaluator(lambda cancelled: (release.wait(5), (0.5, 0.5))[1], lambda: 0.0, interval_s=0.01).start()
    t = time.monotonic()
    assert not ev.stop(0.2)  # stuck in an evaluation
    assert time.monotonic() - t < 1.0
    release.set()
    assert ev.stop(2.0)


def test_stop_cancels_an_evaluation_that_checks_and_drops_its_result():
    started = threading.Event()

    def evaluate(cancelled):  # an evaluation of many batches that checks between them
        started.set()
        for _ in range(500):
            if cancelled():
                return None
            time.sleep(0.01)
        return 0.5, 0.5

    ev = Evaluator(evaluate, lambda: 0.0, interval_s=0.01).start()
    assert started.wait(5)
    t = time.monotonic()
    assert ev.stop(2.0)  # ended within a batch, not after the whole 5 s evaluation
    assert time.monotonic() - t < 1.0
    assert ev.results() == []


def test_evaluate_stops_between_batches_once_cancelled():
    import numpy as np

    from edgemesh_tf.engine.runtime.evaluator import evaluate

    class Graph:
        logits, loss, images, labels = "logits", "loss", "images", "labels"

    runs = []

    def run(fetch, feeds):
        runs.append(fetch)
        return np.zeros((4, 3)) if fetch == "logits" else 0.0

    x, y = np.zeros((12, 2, 2, 1), np.float32), np.zeros(12, np.int64)
    assert evaluate(run, Graph, x, y, x, y, 4) == (1.0, 0.0)  # 3 test batches, 3 loss batches
    runs.clear()
    assert evaluate(run, Graph, x, y, x, y, 4, cancelled=lambda: len(runs) >= 2) is None
    assert runs == ["logits", "logits"]


def test_the_final_evaluation_is_the_whole_test_set_or_a_subset_that_holds_the_evaluations_one():
    sub, final = held_out_indices(50, seed=3, eval_examples=10, final_examples=None)
    assert len(sub) == 10 and len(set(sub)) == 10 and list(final) == list(range(50))
    again, _ = held_out_indices(50, seed=3, eval_examples=10, final_examples=None)
    assert list(again) == list(sub)  # a fixed subset: every evaluation of a run sees the same images
    sub, final = held_out_indices(50, seed=3, eval_examples=10, final_examples=20)
    assert len(final) == 20 and set(sub) <= set(final)
    sub, final = held_out_indices(50, seed=3, eval_examples=10, final_examples=5)
    assert set(final) <= set(sub) and len(final) == 5
    assert list(held_out_indices(50, seed=4, eval_examples=10, final_examples=None)[0]) != list(sub)


def test_back_to_back_evaluations_hold_the_masters_only_to_copy_them():
    locks, stop, events = ReplicaLocks(), threading.Event(), []

    def evaluations():
        while not stop.is_set():  # back to back, as when an evaluation takes longer than the interval
            locks.evaluation(lambda: events.append("copy"), lambda: time.sleep(0.3))
    thread = threading.Thread(target=evaluations, daemon=True)
    thread.start()
    time.sleep(0.05)
    waits = []
    for _ in range(3):  # a checkpoint reading the masters
        t0 = time.monotonic()
        with locks.masters:
            waits.append(time.monotonic() - t0)
        time.sleep(0.1)
    stop.set()
    thread.join(2.0)
    assert max(waits) < 0.15, waits  # held for a whole evaluation, the first wait alone would be ~0.25 s
    assert events.count("copy") >= 2
