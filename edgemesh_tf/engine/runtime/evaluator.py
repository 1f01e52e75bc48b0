"""The chief's evaluations in a thread of their own, so that its control loop keeps its tick.

An evaluation (pull the global model, held-out accuracy, training loss on a subset) takes about
as long as the evaluation interval on a small machine; run inline it would delay every decision
that needs no accuracy (ASHL's end of profiling, liveness, stop conditions) by up to that much.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable

import numpy as np

from edgemesh_tf.data.dataset import padded_batches


def held_out_indices(n_test: int, seed: int, eval_examples: int,
                     final_examples: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(indices of the evaluations during training, of the final evaluation) into a test set of
    n_test examples: the first eval_examples / final_examples of one fixed random order (seed + 1),
    so one subset holds the other; final_examples None: the whole test set in order."""
    order = np.random.RandomState(seed + 1).permutation(n_test)
    final = np.arange(n_test) if final_examples is None else order[:final_examples]
    return order[:eval_examples], final


class ReplicaLocks:
    """The chief's own replica, shared by its evaluations (a thread) and its checkpoints: `masters`
    guards the master variables (a pull, a read), `evaluation(copy, run)` holds them only for
    `copy()` (pull the global model into the masters, copy them to the slices) and then, holding
    the slices only, `run()` (the evaluation on the slices). Held for the whole evaluation, back-to-
    back evaluations (~4 s each on a busy edge4) kept a checkpoint, and with it the chief's control
    loop, waiting ~17 s."""

    def __init__(self):
        self.masters = threading.Lock()
        self._slices = threading.Lock()

    def evaluation(self, copy: Callable[[], None], run: Callable[[], object]):
        with self._slices:
            with self.masters:
                copy()
            return run()


class Evaluator:
    """Calls evaluate(cancelled) -> (accuracy, loss) every interval_s (measured from the start of the
    last call; back to back when one takes longer) until stopped; `results()` returns the finished
    ones as (elapsed s at the start, accuracy, loss) and re-raises an error of the thread.
    cancelled() turns true at `stop`: an evaluation that sees it may return None (dropped), so that
    the stop does not wait for a whole evaluation (~4 s on a busy edge4)."""

    def __init__(self, evaluate: Callable[[Callable[[], bool]], tuple[float, float] | None],
                 elapsed: Callable[[], float], interval_s: float):
        self._evaluate, self._elapsed, self.interval_s = evaluate, elapsed, interval_s
        self._stop = threading.Event()
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chief-evaluator", daemon=True)

    def start(self) -> "Evaluator":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                t = self._elapsed()
                result = self._evaluate(self._stop.is_set)
                if result is None:  # cancelled by stop
                    return
                self._out.put((t, *result))
                self._stop.wait(max(0.0, t + self.interval_s - self._elapsed()))
        except BaseException as e:  # noqa: BLE001 - handed to the control loop by results()
            self._error = e

    def results(self) -> list[tuple[float, float, float]]:
        out = []
        while True:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                break
        if self._error is not None and not out:
            raise self._error
        return out

    def stop(self, timeout_s: float) -> bool:
        """Asks the thread to stop and waits at most timeout_s; True if it has ended."""
        self._stop.set()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def evaluate(run: Callable, train, test_x, test_y, loss_x, loss_y, batch: int,
             cancelled: Callable[[], bool] = lambda: False) -> tuple[float, float] | None:
    """(accuracy on test_x/test_y, mean loss on loss_x/loss_y) of a replica built for `batch` examples
    (a `TrainGraph`: images, labels, logits, loss); run(fetches, feeds) runs its session. A padded
    last batch counts its real examples for the accuracy and is left out of the loss (its mean
    would count the repeats). None once cancelled() is true (checked before each test batch)."""
    correct, losses = 0, []
    for xb, yb, n in padded_batches(test_x, test_y, batch):
        if cancelled():
            return None
        logits = run(train.logits, {train.images: xb, train.labels: yb})
        correct += int(np.sum(np.argmax(logits[:n], 1) == yb[:n]))
    for xb, yb, n in padded_batches(loss_x, loss_y, batch):
        if n == batch:
            losses.append(float(run(train.loss, {train.images: xb, train.labels: yb})))
    return correct / len(test_x), float(np.mean(losses))
