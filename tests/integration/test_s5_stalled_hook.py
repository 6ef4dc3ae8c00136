"""A client whose hook stalls holds what waits for its call on the worker (the deployer's
train()/eval(), a reload) only as long as the worker's hook deadline: 300 s by default, and
``--hook-timeout`` sets it (a shared service sets it to what its clients' hooks need). Before,
nothing set it: an attached client whose forward hook slept held the deployer's eval() for
as long as it slept, up to 300 s."""
import threading
import time

import pytest
from clusters import worker

import disthook as torch
from disthook import nn
from disthook.distributed import connect

pytestmark = pytest.mark.timeout(120)


def test_a_stalled_hook_holds_the_deployer_only_until_the_hook_deadline():
    with worker("--hook-timeout", "2") as address, \
            connect(address.coordinator, timeout=60) as deployer, \
            connect(address.coordinator, timeout=60) as other:
        remote = deployer.deploy(nn.Sequential(nn.Linear(2, 2)), stages=1, name="s5-stall")
        attached = other.attach("s5-stall")
        entered = threading.Event()
        attached[0].register_forward_hook(lambda *_: (entered.set(), time.sleep(12)))
        failed = []

        def call():
            try:
                attached(torch.ones(1, 2))
            except Exception as exc:  # noqa: BLE001 - what the call raised
                failed.append(exc)

        stalled = threading.Thread(target=call, daemon=True)  # (not waited for on a failure)
        stalled.start()
        # its call waits in its hook now (a fixed wait let eval() go first on a slow machine,
        # and then nothing waited on the hook)
        assert entered.wait(60), f"the attached call never reached its hook: {failed}"
        start = time.monotonic()
        remote.eval()
        took = time.monotonic() - start
        stalled.join(30)
        assert took < 6, f"the deployer's eval() waited {took:.1f} s"
        assert failed, "the stalled call did not fail"
        assert "TimeoutError" in str(failed[0])
        assert "waited 2 s for the client's answer to its forward hook" in str(failed[0])
