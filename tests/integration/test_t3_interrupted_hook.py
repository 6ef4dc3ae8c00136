"""Ctrl-C (KeyboardInterrupt) while a client hook runs, here after a thread the hook started
called the model with the sockets lent to it: the call raises KeyboardInterrupt at once, and
the model serves the next calls at once with the right values (before, the worker waited for
the interrupted hook's answer, and every later call ended in RemoteTimeout)."""
import threading
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("stages", [1, 2])
def test_ctrl_c_in_a_hook_whose_thread_called_the_model_leaves_the_model_usable(stages):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    x = torch.ones(2, 4)
    with local_cluster(workers=2, timeout=15) as cluster:
        remote = cluster.deploy(net, stages=stages)
        fired, borrowed = [], []

        def hook(module, args, out):
            if fired:  # (the thread's own call fires it too)
                return
            fired.append(module)
            thread = threading.Thread(target=lambda: borrowed.append(remote(x)))
            thread.start()
            thread.join()
            raise KeyboardInterrupt  # as Ctrl-C lands in the main thread here

        handle = remote[0].register_forward_hook(hook)
        with pytest.raises(KeyboardInterrupt):
            remote(x)
        handle.remove()
        assert len(borrowed) == 1 and bool((borrowed[0] - net(x)).abs().max() < 1e-6)
        started = time.monotonic()
        for scale in (1.0, 2.0):
            assert bool((remote(x * scale) - net(x * scale)).abs().max() < 1e-6)
        assert time.monotonic() - started < 5  # not a request deadline
        remote.close()
