"""The submodules of a deployed model are modules of their own class (a Linear's proxy is an
nn.Linear), one per path, so tools that walk named_modules() and pick modules by type find
them all and hook them as in one process; handles are RemovableHandles."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.service.rpc import RemoteError
from disthook.utils.hooks import RemovableHandle

pytestmark = pytest.mark.timeout(180)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(),
                         nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)),
                         nn.LayerNorm(8), nn.Linear(8, 3))


def cache_linear_outputs(model, x):
    """What feature-extraction toolkits do: a forward hook on every Linear, found by type."""
    cache, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(
                lambda m, args, out, name=name: cache.__setitem__(name, out.detach().numpy())))
    model(x)
    for h in handles:
        assert isinstance(h, RemovableHandle)
        h.remove()
    return cache


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_a_walk_by_type_finds_and_hooks_every_module_as_in_one_process(cluster, stages):
    x = torch.randn(4, 6)
    expected = cache_linear_outputs(make_net(), x)
    remote = cluster.deploy(make_net(), stages=stages)
    try:
        got = cache_linear_outputs(remote, x)
        assert sorted(got) == sorted(expected) == ["0", "2.0", "2.2", "4"]
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6)
        kinds = [type(m).__name__ for _, m in remote.named_modules()][1:]
        assert kinds == [type(m).__name__ for _, m in make_net().named_modules()][1:]
    finally:
        remote.close()


def test_proxies_are_modules_of_their_class_one_per_path(cluster):
    remote = cluster.deploy(make_net(), stages=2)
    try:
        first, block = remote[0], remote[2]
        assert isinstance(first, nn.Linear) and isinstance(first, nn.Module)
        assert isinstance(block, nn.Sequential) and not isinstance(first, nn.Sequential)
        assert first is remote[0] is remote.get_submodule("0")
        assert block[0] is remote.get_submodule("2.0") and len(block) == 3
        assert [type(m).__name__ for m in block] == ["Linear", "Tanh", "Linear"]
        assert (first.in_features, first.out_features) == (6, 8)
        assert first.weight is remote[0].weight is remote.get_parameter("0.weight")
        assert first.weight.data is first.weight.data is not first.weight
        assert len(list(remote.parameters())) == len(list(make_net().parameters()))
        assert [n for n, _ in block.named_parameters()] == ["0.weight", "0.bias", "2.weight",
                                                           "2.bias"]
        state = block.state_dict()
        np.testing.assert_array_equal(state["0.weight"].numpy(),
                                      make_net()[2][0].weight.detach().numpy())
        np.testing.assert_array_equal(remote[3].weight.detach().numpy(), np.ones(8, np.float32))
        first.tag = "kept"  # a plain attribute stays on the (one) proxy
        assert remote[0].tag == "kept"
        # calling a submodule runs it alone on its worker, gradients and all
        x = torch.randn(2, 6, requires_grad=True)
        local = make_net()[0]
        x_local = x.detach().clone().requires_grad_(True)
        out = first(x)
        np.testing.assert_allclose(out.detach().numpy(), local(x_local).detach().numpy(),
                                   rtol=1e-6, atol=1e-6)
        out.sum().backward()
        local(x_local).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), x_local.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(remote.named_gradients()["0.weight"].numpy(),
                                   local.weight.grad.numpy(), rtol=1e-6, atol=1e-7)
        remote.zero_grad()
        with pytest.raises(RemoteError, match="TypeError: Linear.forward.. takes 2 positional"):
            block[0](x, x)  # torch's own error, from the worker
        first.weight = nn.Parameter(torch.zeros(8, 6))  # its own tensor: it computes here
        np.testing.assert_array_equal(first(torch.ones(1, 6)).detach().numpy()[0],
                                      first.bias.detach().numpy())
        assert remote.get_parameter("0.weight") is first.weight
        block.eval()  # one part's mode, on its worker, as in one process
        assert not block.training and not block[0].training and remote.training
        block.train()
        # zero_grad of one submodule clears only its own parameters' gradients
        remote(torch.randn(4, 6)).sum().backward()
        block.zero_grad()
        grads = remote.named_gradients()
        assert first.weight.grad is not None and "0.bias" in grads  # (its weight is here)
        assert not any(n.startswith("2.") for n in grads)
    finally:
        remote.close()


def test_a_deployed_model_prints_as_torch_prints_it(cluster):
    remote = cluster.deploy(make_net(), stages=2)
    assert repr(remote) == repr(make_net())  # the model's own repr: it is the model
    assert [names for _, _, names in remote.workers()] == [["0", "1"], ["2", "3", "4"]]
    param = repr(remote[0].bias)  # as torch prints it: the same text in one process
    assert param == repr(dict(remote.to_local().named_parameters())["0.bias"])
    bias = remote[0].bias
    remote.close()  # the model comes back here: its parameters print their values
    assert repr(bias) == param


def test_a_placed_module_is_of_its_class_exactly(cluster):
    """Tools pick modules by exact type (Captum's DeepLift: ``type(m) in {nn.ReLU: rule}``,
    ``"nn.modules.container" in str(type(m))``, a per-sample-gradient library's
    ``type(layer) is nn.Conv2d``): a placed module is of its own class."""
    remote = cluster.deploy(make_net(), stages=2)
    try:
        relu = remote[1]
        assert type(relu) is nn.ReLU and {nn.ReLU: "rule"}[type(relu)] == "rule"
        assert type(remote[0]) is nn.Linear and type(remote[2]) is nn.Sequential
        assert "nn.modules.container" in str(type(remote[2]))
    finally:
        remote.close()


def test_a_tensor_hook_on_a_hooks_input_fires_once_when_the_hook_returns_a_copy(cluster):
    """DeepLift's pattern: a pre-hook hooks its input and returns a clone of it; the clone's
    vector-Jacobian product is taken here, and must not run the input's hooks a second time
    (the worker's tensor runs them)."""
    calls = {"local": 0, "remote": 0}
    grads = {}
    for name, model in (("local", make_net()), ("remote", cluster.deploy(make_net(),
                                                                          stages=2))):
        def pre(module, args, name=name):
            def count(g):
                calls[name] += 1
                return g * 2
            args[0].register_hook(count)
            return args[0].clone()

        model[2].register_forward_pre_hook(pre)
        torch.manual_seed(3)
        x = torch.randn(4, 6, requires_grad=True)
        model(x).sum().backward()
        grads[name] = x.grad.numpy()
        if name == "remote":
            model.close()
    assert calls == {"local": 1, "remote": 1}
    np.testing.assert_allclose(grads["remote"], grads["local"], rtol=1e-5, atol=1e-7)
