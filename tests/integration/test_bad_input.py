"""Bad input to a deployed model: each mistake ends the call with a clear error at the caller
(its type, the place, the values), and the very next call on the same model succeeds.

One model on 2 workers serves every case; ``works`` is the "next call": a forward and
backward whose output and gradients equal the one-process model's.
"""
import copy
import importlib
import sys

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, hooks
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


@pytest.fixture(scope="module")
def deployed(cluster):
    remote = cluster.deploy(make_net(), stages=2)
    yield remote
    remote.close()


def works(remote):
    """A forward and backward on ``remote`` give what one process gives."""
    torch.manual_seed(5)
    x = torch.randn(4, 8)
    net = make_net()
    want = net(x)
    want.sum().backward()
    remote.zero_grad()
    got = remote(x)
    got.sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    grads = remote.named_gradients()
    for name, p in net.named_parameters():
        np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_wrong_input_shape_names_the_module_the_stage_and_the_shape(deployed):
    with pytest.raises(RemoteError) as info:
        deployed(torch.randn(4, 5))
    err = info.value
    assert err.kind == "RuntimeError" and err.path == "0"
    assert err.stage.startswith("stage 0 of ")
    assert "(4x5 and 8x16)" in err.message
    assert "was float32 of shape (4, 5)" in err.message
    assert "module '0'" in str(err) and "Remote traceback" in str(err)
    works(deployed)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_wrong_input_dtype_names_both_dtypes(deployed, dtype):
    with pytest.raises(RemoteError, match="same dtype") as info:
        deployed(torch.ones(4, 8, dtype=dtype))
    assert info.value.path == "0"
    assert f"was {str(dtype).split('.')[1]} of shape (4, 8)" in info.value.message
    works(deployed)


def test_an_error_in_the_second_stage_names_that_stage(cluster):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(5, 3))  # 6 -> 5: wrong
    remote = cluster.deploy(net, stages=2, split_points=[2])
    try:
        with pytest.raises(RemoteError, match=r"\(4x6 and 5x3\)") as info:
            remote(torch.randn(4, 8))
        assert info.value.path == "2" and info.value.stage.startswith("stage 1 of ")
        assert "was float32 of shape (4, 6)" in info.value.message
    finally:
        remote.close()
    works(cluster.deploy(make_net(), stages=2))


@pytest.mark.parametrize("reach", [
    lambda r: r.get_submodule("7"),
    lambda r: r.get_submodule("2.weight_x"),
    lambda r: r.get_parameter("0.bias_x"),
    lambda r: r.get_submodule("9").register_forward_hook(print),
])
def test_an_unknown_module_path_is_an_attribute_error_naming_it(deployed, reach):
    with pytest.raises(AttributeError, match=r"has no attribute `(7|weight_x|bias_x|9)`"):
        reach(deployed)
    works(deployed)


def test_a_client_hook_that_raises_reaches_the_caller_with_its_traceback(deployed):
    def broken_hook(module, args, output):
        raise ValueError(f"no good: {tuple(output.shape)}")

    handle = deployed[2].register_forward_hook(broken_hook)
    with pytest.raises(ValueError, match=r"no good: \(4, 3\)") as info:
        deployed(torch.randn(4, 8))
    assert any(entry.name == "broken_hook" for entry in info.traceback)
    handle.remove()
    works(deployed)


@pytest.mark.parametrize("name, returns, expected", [
    ("count", lambda gi: (gi[0], gi[0]),
     "invalid number of grad_input, got 2, but expected 1"),
    ("shape", lambda gi: (gi[0][:, :2],), "hook 'hook' has changed the size of value"),
    ("dtype", lambda gi: (gi[0].double(),), "has changed the type of value"),
])
def test_a_backward_hook_returning_wrong_gradients_is_refused(deployed, name, returns,
                                                               expected):
    handle = deployed[2].register_full_backward_hook(lambda m, gi, go: returns(gi))
    out = deployed(torch.randn(4, 8))
    with pytest.raises(RemoteError, match=expected) as info:
        out.sum().backward()
    assert info.value.stage.startswith("stage 1 of ")
    handle.remove()
    works(deployed)


def test_a_gradient_hook_returning_a_wrong_shape_on_a_parameter(deployed):
    """Named as torch names it: the user's function (its __name__), not the worker's stub."""
    def halve(g):
        return g.double()

    for hook, said in [(lambda g: g[:1], "hook '<lambda>' has changed the size of value"),
                       (halve, "hook 'halve' has changed the type of value (was "
                               "torch.FloatTensor got torch.DoubleTensor)")]:
        handle = deployed.get_parameter("2.weight").register_hook(hook)
        out = deployed(torch.randn(4, 8))
        with pytest.raises(RuntimeError) as info:
            out.sum().backward()
        assert str(info.value) == said
        handle.remove()
        works(deployed)


def test_backward_twice_without_retain_graph(deployed):
    out = deployed(torch.randn(4, 8)).sum()
    out.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()
    works(deployed)


def test_a_class_the_workers_cannot_import_travels_with_the_model_or_is_named(cluster, tmp_path,
                                                                              monkeypatch):
    """Pickled by value, the class needs no import on the workers; as data (what a shared
    service takes) it is refused, naming the class and the fix."""
    (tmp_path / "dh_unreachable.py").write_text(
        "from disthook import nn\n\n"
        "class Doubler(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # here only: the workers started before
    module = importlib.import_module("dh_unreachable")
    try:
        net = nn.Sequential(nn.Linear(8, 8), module.Doubler())
        remote = cluster.deploy(copy.deepcopy(net), stages=2)
        x = torch.randn(3, 8)
        np.testing.assert_allclose(remote(x).detach().numpy(), net(x).detach().numpy(),
                                   rtol=1e-6)
        remote.close()
        spec = module_spec(nn.Sequential(module.Doubler()))
        with Peer(cluster.workers()[0].address) as peer:
            with pytest.raises(RemoteError, match=r"module '0': cannot find class "
                                                  r"'dh_unreachable:Doubler'.*PYTHONPATH") as info:
                peer.request("load_stage", {"model": "m", "stage": 0, "spec": spec}, timeout=30)
        assert info.value.kind == "SpecError"
    finally:
        sys.modules.pop("dh_unreachable", None)
    remote = cluster.deploy(make_net(), stages=2)
    try:
        works(remote)
    finally:
        remote.close()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("where", ["activation", "gradient"])
def test_non_finite_values_with_check_finite_name_the_place(cluster, where):
    remote = cluster.deploy(make_net(), stages=2)
    try:
        if where == "activation":
            remote[0].register_forward_hook(hooks.check_finite())
            x = torch.randn(4, 8)
            x[1, 2] = float("nan")
            with pytest.raises(RemoteError, match=r"check_finite: 16 non-finite value\(s\) "
                                                  r"in a tensor of shape \(4, 16\) seen by the "
                                                  r"forward hook on '0'"):
                remote(x)
        else:
            remote.get_parameter("2.weight").register_hook(hooks.check_finite())
            out = remote(torch.randn(4, 8))
            with pytest.raises(RemoteError, match=r"check_finite: \d+ non-finite value\(s\) "
                                                  r"in a tensor of shape \(3, 16\)"):
                (out * float("inf")).sum().backward()
        remote.zero_grad()
        out = remote(torch.randn(4, 8))
        out.sum().backward()  # with the hook still on, a finite step passes
        assert np.isfinite(remote.named_gradients()["2.weight"].numpy()).all()
    finally:
        remote.close()


class Warns(nn.Module):
    def forward(self, x):
        import warnings

        warnings.warn("the worker's own warning", RuntimeWarning)
        return x * 2


def test_a_workers_warning_points_at_the_users_line(cluster):
    import warnings

    remote = cluster.deploy(nn.Sequential(nn.Linear(2, 2), Warns()), stages=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        remote(torch.ones(1, 2))
    [warning] = [w for w in caught if "the worker's own warning" in str(w.message)]
    assert warning.category is RuntimeWarning
    assert (warning.filename, warning.lineno) == (__file__, line)
    remote.close()


class LogOfZero(nn.Module):
    def forward(self, x):  # T5's relative-position buckets take the log of 0 and cast -inf
        return (torch.log(x * 0) / 2).to(torch.long).float() + x / x


def test_log_of_zero_on_a_worker_warns_no_more_than_in_one_process(cluster):
    import warnings

    def program_filters():
        # every warning shown, but those `import disthook` drops (pytest's own filters, set
        # around each test, leave out the one the import set)
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", r"(divide by zero|invalid value|overflow|underflow) "
                                "encountered", RuntimeWarning, r"disthook(\.|$)")

    model = nn.Sequential(nn.Linear(2, 2), LogOfZero())
    with warnings.catch_warnings(record=True) as here:
        program_filters()
        want = model(torch.zeros(1, 2)).detach().numpy()
    remote = cluster.deploy(model, stages=1)
    try:
        with warnings.catch_warnings(record=True) as there:
            program_filters()
            got = remote(torch.zeros(1, 2)).detach().numpy()
        assert [str(w.message) for w in here] == []
        assert [str(w.message) for w in there] == []
        np.testing.assert_array_equal(got, want)
    finally:
        remote.close()


class ReluNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act = nn.Linear(3, 3), nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


@pytest.mark.parametrize("make, relu", [
    (lambda: nn.Sequential(nn.Linear(3, 3), nn.ReLU()), "1"), (ReluNet, "act")],
    ids=["chain", "tree"])
def test_a_pre_hook_handing_relu_two_arguments_raises_typeerror_as_in_one_process(cluster,
                                                                                    make, relu):
    remote = cluster.deploy(make(), stages=1)
    act = remote.get_submodule(relu)
    act.register_forward_pre_hook(lambda m, args: (args[0], args[0]))
    with pytest.raises(TypeError, match=r"ReLU.forward\(\) takes 2 positional arguments but 3 "
                                        "were given"):
        remote(torch.ones(2, 3))
    remote.close()


class QuitsOnLargeInput(nn.Module):
    """A part whose code ends its program on some input (``sys.exit`` in a forward)."""

    def forward(self, x):
        if float(x.detach().abs().max()) > 1e3:
            sys.exit(3)
        return x * 2


def test_a_part_that_calls_sys_exit_ends_the_call_not_the_worker(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), QuitsOnLargeInput()), stages=2)
    try:
        with pytest.raises(RemoteError, match=r"SystemExit\(3\)") as info:
            remote(torch.full((2, 4), 1e4))
        assert "QuitsOnLargeInput" in str(info.value) or "sys.exit" in str(info.value)
        x = torch.ones(2, 4)
        np.testing.assert_allclose(remote(x).detach().numpy(),
                                   (remote[0](x) * 2).detach().numpy())  # it serves on
    finally:
        remote.close()
