"""The training step's executor takes a received array as it came, unless the pass may run
again (client hooks running ahead, ``job.spec``): then each run starts from a copy, so that
a pass that changed its input in place does not feed the run again its own changes."""
import numpy as np

from workers.steps import _fresh


class _Job:
    def __init__(self, spec=None):
        self.spec = spec


def test_a_pass_that_runs_once_takes_the_received_array_itself():
    frame = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert _fresh(frame, _Job()) is frame


def test_a_pass_that_may_run_again_takes_a_copy_each_time():
    frame = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = _fresh(frame, _Job(spec=object()))
    first *= 0  # the first run changes its input in place
    again = _fresh(frame, _Job(spec=object()))
    assert not np.shares_memory(first, frame)
    np.testing.assert_array_equal(again, np.arange(6, dtype=np.float32).reshape(2, 3))
