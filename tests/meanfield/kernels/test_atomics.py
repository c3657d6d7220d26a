"""meanfield.kernels.atomics: every item claimed exactly once by threads running the same compiled loop."""
from __future__ import annotations

import threading

import numpy as np

from meanfield.kernels.atomics import fetch_add
from meanfield.kernels.jit import jit


@jit
def _claim(counter, owner, me):  # pragma: no cover - compiled
    """Claim items ``k`` of ``owner`` until none is left, marking each with ``me``; returns how many."""
    taken = 0
    while True:
        k = fetch_add(counter, 0, 1)
        if k >= owner.shape[0]:
            return taken
        owner[k] += me
        taken += 1


def test_two_threads_claim_every_item_once():
    items = 400_000
    counter = np.zeros(1, dtype=np.int64)
    owner = np.zeros(items, dtype=np.int64)
    _claim(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), 1)  # compiled before the threads race
    taken = [0, 0]

    def run(slot: int) -> None:
        taken[slot] = _claim(counter, owner, slot + 1)

    helper = threading.Thread(target=run, args=(1,))
    helper.start()
    run(0)
    helper.join()
    assert sum(taken) == items and np.all((owner == 1) | (owner == 2))  # each item once, by one of the two
    assert int(counter[0]) == items + 2  # one failed claim each
