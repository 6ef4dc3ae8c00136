"""A client hook that calls its own deployed model, itself or from a thread it starts and
joins (a hook that fans work out to threads, as one process allows). Before, a thread's
call waited for the model's sockets, which the hook's call held while its hook ran: the
hook waited for the thread, the thread for the hook, and the program hung; the hook's own
call of the whole model waited behind the call that fired it, 30 s, then RemoteTimeout.
Now a thread the hook started takes the sockets while the hook runs, its requests nested
in the hook's call as the hook's own are, and a whole-model call from a hook a first-stage
module fired carries that call's context (``within``, as a part's call from a hook does),
so the first stage's worker runs it at once: values and gradients as in one process. A
hook fired by a later stage, whose worker the call could only wait behind, is refused at
once."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed.placed import deployment_of

pytestmark = pytest.mark.timeout(180)

CLUSTER_WORKERS = 2
JOIN_S = 40.0


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _thread(call):
    result = {}

    def run():
        try:
            result["value"] = call()
        except RuntimeError as exc:
            result["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(JOIN_S)
    assert not t.is_alive(), "the hook's thread still waits for the model: a hang"
    return result


def _pool(call):
    with ThreadPoolExecutor(1) as ex:
        future = ex.submit(call)
        try:
            return {"value": future.result(JOIN_S)}
        except RuntimeError as exc:
            return {"error": exc}
        except TimeoutError:
            raise AssertionError("the hook's pool still waits for the model: a hang") from None


def _same_thread(call):
    try:
        return {"value": call()}
    except RuntimeError as exc:
        return {"error": exc}


SPAWNS = pytest.mark.parametrize("spawn", [_same_thread, _thread, _pool],
                                 ids=["same-thread", "thread", "pool"])


def _run(model, at: int, spawn, read=None):
    """``model(x)`` and its backward, with a forward hook on ``model[at]`` whose first
    firing calls ``model(inner)`` (or ``read(model)``) through ``spawn`` and waits for it;
    the output, the first weight's gradient, and what the hook's call gave or raised."""
    inner = torch.full((1, 3), 0.5)
    got = {}

    def hook(mod, args, out):
        if not got:
            got["started"] = True
            got.update(spawn(lambda: read(model) if read else model(inner).detach().numpy()))

    handle = model[at].register_forward_hook(hook)
    try:
        out = model(torch.ones(2, 3))
        out.sum().backward()
    finally:
        handle.remove()
    return out.detach().numpy(), model[0].weight.grad.numpy(), got


@SPAWNS
def test_a_hook_of_the_first_stage_calls_its_whole_model(cluster, spawn):
    local, remote = _net(), cluster.deploy(_net(), stages=2)
    try:
        assert len({w for _, w, _ in remote.workers()}) == 2
        want_out, want_grad, want = _run(local, 0, spawn)
        start = time.monotonic()
        out, grad, got = _run(remote, 0, spawn)
        assert time.monotonic() - start < 20, "the hook's call waited for a deadline"
        assert "error" not in got, got.get("error")
        np.testing.assert_allclose(got["value"], want["value"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


@SPAWNS
def test_a_hook_of_a_later_stage_calling_its_whole_model_is_refused_at_once(cluster, spawn):
    """The later stage's worker waits for the hook: the call could only wait behind it."""
    remote = cluster.deploy(_net(), stages=2)
    try:
        start = time.monotonic()
        _, _, got = _run(remote, 2, spawn)
        assert time.monotonic() - start < 20, "the hook's call waited for a deadline"
        assert isinstance(got.get("error"), RuntimeError), got
        assert "fired by a later stage" in str(got["error"])
        # the model serves on after
        np.testing.assert_allclose(remote(torch.ones(2, 3)).detach().numpy(),
                                   _net()(torch.ones(2, 3)).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    finally:
        remote.close()


@pytest.mark.parametrize("spawn", [_thread, _pool], ids=["thread", "pool"])
def test_a_hooks_thread_reads_the_models_weights(cluster, spawn):
    """What a hook may do itself (read a weight of its model, on a later stage), a thread
    it starts and joins may do too: it runs inside the hook's call."""
    local, remote = _net(), cluster.deploy(_net(), stages=2)
    try:
        def read(m):
            return m[2].weight.detach().numpy()

        want_out, _, want = _run(local, 2, spawn, read)
        out, _, got = _run(remote, 2, spawn, read)
        assert "error" not in got, got.get("error")
        np.testing.assert_array_equal(got["value"], want["value"])
        np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


def test_a_thread_from_before_the_hook_is_refused_after_the_timeout_not_left_waiting(cluster):
    """A pool made before the hook: its thread is another call's, not the hook's, and
    waits for the hook's call to end; the hook waits for it. Refused once it waited the
    model's timeout, then the call goes on."""
    remote = cluster.deploy(_net(), stages=1)
    deployment_of(remote)._hub.timeout = 4.0
    pool = ThreadPoolExecutor(1)
    try:
        pool.submit(lambda: None).result()  # its thread runs from now on

        def in_old_pool(call):
            try:
                return {"value": pool.submit(call).result(JOIN_S)}
            except RuntimeError as exc:
                return {"error": exc}

        start = time.monotonic()
        out, _, got = _run(remote, 0, in_old_pool)
        assert time.monotonic() - start < JOIN_S / 2
        assert isinstance(got.get("error"), RuntimeError), got
        assert "start the thread (or the pool) inside the hook" in str(got["error"])
        np.testing.assert_allclose(out, _net()(torch.ones(2, 3)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    finally:
        pool.shutdown()
        remote.close()
