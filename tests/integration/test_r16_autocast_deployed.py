"""``torch.autocast("cpu")`` around a deployed model (timm's and HF Trainer's mixed-precision
step on the CPU). The region did not reach the workers: the placed layers computed in
float32 there, where one process computes them in bfloat16 (an output of another dtype and
other values, silently); then the call was refused. A request now carries the region's dtype
("autocast") and the worker computes under it: outputs, hooks' activations, parameters'
gradients and train_step's losses are one process's, a region switched off inside it
(``enabled=False``) too, and a call waiting on its client's hook lends its region to no
other client's call.

A part's output kept on its worker (the second call on: its answer's form is known), cast to
bfloat16 there (``h.to(torch.bfloat16)``, or a region's cast of it): the op's numpy dtype
travelled as ``"<V2"``, which the worker read as a plain void, so the cast made bytes of no
dtype and its answer could not be sent (WireError). It reads as bfloat16 now."""
import threading

import numpy as np
import pytest
from helpers import TANH_X, TanhNet, deployed_run, tanh_chain

import disthook as torch
from disthook import nn
from disthook.distributed import connect
from disthook.service import op_calls

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2
X = TANH_X
Net, chain = TanhNet, tanh_chain


def _same(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_array_equal(a.float().detach().numpy(), b.float().detach().numpy())


def _in_and_out_of_regions(model):
    """Forwards in a bfloat16 region (twice: the second call's form is known), in one
    switched off inside it, and after; a hook on the first layer logging what it sees; the
    backward of the region's output."""
    seen = []
    layer = model.a if hasattr(model, "a") else model[0]
    layer.register_forward_hook(lambda m, args, out: seen.append((args[0].dtype, out.dtype)))
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        outs = [model(torch.tensor(X)) for _ in range(2)]
        with torch.autocast(device_type="cpu", enabled=False):
            outs.append(model(torch.tensor(X)))
        outs[0].float().pow(2).sum().backward()
    outs.append(model(torch.tensor(X)))
    return outs, seen, [p.grad for p in model.parameters()]


@pytest.mark.parametrize("make", [Net, chain], ids=["own-forward", "chain"])
def test_a_deployed_forward_inside_cpu_autocast_computes_as_one_process(cluster, make):
    (outs, seen, grads), (want, want_seen, want_grads) = deployed_run(
        cluster, make, _in_and_out_of_regions)
    assert [o.dtype for o in want] == [torch.bfloat16] * 2 + [torch.float32] * 2
    for a, b in zip(outs, want):
        _same(a, b)
    assert seen == want_seen == [(torch.float32, torch.bfloat16)] * 2 + \
        [(torch.float32, torch.float32)] * 2
    for g, w in zip(grads, want_grads):
        assert g.dtype == w.dtype == torch.float32
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_calls_in_and_out_of_a_region_answer_each_in_its_own_form(cluster, dtype):
    """A placed part's call whose answer's form is known returns before its answer (no
    hook): that form is the region's, not the last call's of the same arguments."""

    def run(model):
        outs = []
        for region in (True, True, False, False, True):
            with torch.autocast(device_type="cpu", dtype=dtype, enabled=region):
                outs.append(model(torch.tensor(X)) * 1)
        return outs

    got, want = deployed_run(cluster, Net, run)
    assert [o.dtype for o in want] == [dtype] * 2 + [torch.float32] * 2 + [dtype]
    for a, b in zip(got, want):
        _same(a, b)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_deployed_train_step_inside_cpu_autocast_computes_as_one_process(cluster, schedule):
    target = torch.tensor(np.linspace(0, 1, 10, dtype=np.float32).reshape(5, 2))
    one, losses = chain(), []
    for piece, rows in ((slice(0, 3), 3), (slice(3, 5), 2)):  # train_step's micro-batches
        with torch.autocast(device_type="cpu"):
            loss = nn.MSELoss()(one(torch.tensor(X[piece])), target[piece])
        losses.append(loss.item())
        (loss * (rows / 5)).backward()
    model = cluster.deploy(chain(), stages=2, chunks=2, schedule=schedule)
    try:
        with torch.amp.autocast("cpu"):
            got = model.train_step(torch.tensor(X), target, nn.MSELoss())
        assert [float(v) for v in got] == losses
        for p, q in zip(model.parameters(), one.parameters()):
            assert p.grad.dtype == torch.float32
            np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    finally:
        model.close()


def test_a_call_waiting_in_a_hook_lends_its_region_to_no_other_call(cluster):
    """One client's call waits on the worker, in its client's hook, inside a bfloat16
    region; another client's call served meanwhile computes in float32, and the waiting call
    goes on in bfloat16."""
    x = torch.tensor(X)
    want32 = chain()(x)
    with torch.autocast(device_type="cpu"):
        want16 = chain()(x)
    other_model = cluster.deploy(chain(), stages=1)
    hooked, go, out = threading.Event(), threading.Event(), {}
    with connect(cluster.address, timeout=60) as other:
        mine = other.deploy(chain(), stages=1)  # another model, on the same worker

        def wait_in_hook(module, args):
            hooked.set()
            assert go.wait(60)

        mine[1].register_forward_pre_hook(wait_in_hook)

        def call():
            try:
                with torch.autocast(device_type="cpu"):  # (this thread's region)
                    out["mine"] = mine(x)
            except Exception as exc:  # noqa: BLE001 - reported below
                out["mine"] = exc

        thread = threading.Thread(target=call)
        thread.start()
        try:
            assert hooked.wait(60)
            for _ in range(2):
                _same(other_model(x), want32)
        finally:
            go.set()
            thread.join(60)
        assert not isinstance(out["mine"], Exception), out["mine"]
        _same(out["mine"], want16)
        _same(other_model(x), want32)
        mine.close()
    other_model.close()


def test_ops_inside_autocast_on_a_deployed_parts_output_compute_as_one_process(cluster):
    """A part called outside the region, its output used by covered ops inside it: those ops
    cast their arguments here as one process does, so they go on (bfloat16 values equal)."""
    m = torch.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2))

    def run(model):
        h = model.a(torch.tensor(X))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            y = h @ m
            z = nn.functional.linear(h, m.t()).relu().sum(-1)
        return y, z

    want = run(Net())
    model = cluster.deploy(Net(), stages=2)
    try:
        run(model)  # (the part's answer's form is known from the second call on: kept there)
        for a, b in zip(run(model), want):
            assert a.dtype == b.dtype == torch.bfloat16
            np.testing.assert_array_equal(a.float().detach().numpy(), b.float().detach().numpy())
    finally:
        model.close()


def test_a_numpy_bfloat16_dtype_parameter_decodes_as_bfloat16():
    dt = torch.bfloat16.np
    back = op_calls.decode_params(op_calls.encode_params({"dtype": dt}))
    assert back["dtype"] == dt and back["dtype"].name == "bfloat16"


def test_a_kept_output_converted_to_bfloat16_is_one_process_s(cluster):
    m = torch.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2))

    def run(model):
        h = model.a(torch.tensor(X))
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            y = h @ m
        return h.to(torch.bfloat16) * 2, y

    want = run(Net())
    model = cluster.deploy(Net(), stages=2)
    try:
        for _ in range(2):  # the second call's output is kept on the worker
            for a, b in zip(run(model), want):
                assert a.dtype == b.dtype == torch.bfloat16
                np.testing.assert_array_equal(a.float().detach().numpy(),
                                              b.float().detach().numpy())
    finally:
        model.close()
