"""A deployed model called from several threads at once (a server's request threads, a
thread pool over inputs), as a module may be in one process: each call gets its own answer.
Before, the threads' requests shared the model's sockets unguarded: their frames interleaved
(a worker refused a message whose header and arrays came from two calls) and one thread's
read took, and dropped, the answers another waited for, whose calls then timed out."""
import threading

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)

CLUSTER_WORKERS = 2
THREADS, CALLS = 4, 4


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))


def _inputs():
    rng = np.random.default_rng(0)
    return [[rng.standard_normal((5, 3)).astype(np.float32) for _ in range(CALLS)]
            for _ in range(THREADS)]


def _in_threads(work, errors: dict) -> None:
    """``work(k)`` on THREADS threads at once, each joined; none may have failed."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert not errors, errors


def _run_threads(model, inputs, hook_seen=None):
    outputs, errors = {}, {}

    def work(k):
        try:
            for i, a in enumerate(inputs[k]):
                y = model(torch.from_numpy(a))
                y.pow(2).sum().backward()
                outputs[k, i] = y.detach().numpy()
        except Exception as exc:  # noqa: BLE001 - reported below, with the thread's number
            errors[k] = f"{type(exc).__name__}: {str(exc)[:300]}"

    _in_threads(work, errors)
    return outputs


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "client-hook"])
def test_calls_from_several_threads_each_get_their_own_answer(cluster, hooked):
    inputs = _inputs()
    local = _net()
    remote = cluster.deploy(_net(), stages=2)
    try:
        seen = []
        if hooked:  # each call's hook event goes to this client while the others wait
            for m in (local, remote):
                m[0].register_forward_hook(lambda mod, args, out, seen=seen: seen.append(1))
        got = _run_threads(remote, inputs)
        for k in range(THREADS):
            for i, a in enumerate(inputs[k]):
                want = local(torch.from_numpy(a))
                want.pow(2).sum().backward()
                np.testing.assert_allclose(got[k, i], want.detach().numpy(), rtol=1e-5,
                                           atol=1e-6)
        # every call's gradient reached the weights once (a sum: any order)
        for (name, p), q in zip(local.named_parameters(), remote.parameters()):
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-5,
                                       err_msg=name)
        if hooked:
            assert len(seen) == 2 * THREADS * CALLS
    finally:
        remote.close()


def test_a_clusters_questions_from_several_threads_each_get_their_own_answer(cluster):
    """The client's connection to the coordinator, shared by its threads the same way
    (before, every thread's question timed out after the first reads took others' replies)."""
    remote = cluster.deploy(_net(), stages=1, name="s7-threads")
    try:
        answers, errors = {}, {}

        def ask(k):
            try:
                for _ in range(8):
                    answers.setdefault(k, []).append(
                        sorted(m["name"] for m in cluster.models()) if k % 2
                        else len(cluster.workers()))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors[k] = f"{type(exc).__name__}: {str(exc)[:300]}"

        _in_threads(ask, errors)
        for k, got in answers.items():
            assert got == [["s7-threads"] if k % 2 else CLUSTER_WORKERS] * 8, (k, got)
    finally:
        remote.close()
