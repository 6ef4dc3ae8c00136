"""Inference tensors from a deployed model: what a deployed model returns under
``inference_mode()`` is an inference tensor, as in one process (values kept on the workers
included), so an in-place change of it outside the mode is refused, as is saving it for
backward; its clone is a normal tensor, with the same values."""
import numpy as np
import pytest
from helpers import TwoLayers, deployed_run

import disthook as torch

CLUSTER_WORKERS = 2
INPLACE = "Inplace update to inference tensor outside InferenceMode is not allowed."
SAVED = "Inference tensors cannot be saved for backward."


def program(model):
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    with torch.inference_mode():
        out = model(x)
    log = [out.is_inference(), out[0].is_inference()]
    for change in (lambda: out.mul_(2), lambda: out[0].add_(1)):
        with pytest.raises(RuntimeError) as err:
            change()
        log.append(str(err.value).startswith(INPLACE))
    w = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError) as err:
        w * out
    log.append(str(err.value).startswith(SAVED))
    copy = out.clone()
    copy.mul_(2)
    log += [copy.is_inference(), copy.tolist()]
    return log


def chain():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def tree():
    torch.manual_seed(0)
    return TwoLayers()  # its forward runs here: its output is kept on a worker


@pytest.mark.parametrize("make", [chain, tree], ids=["chain", "tree"])
def test_a_deployed_output_made_in_inference_mode_is_an_inference_tensor(cluster, make):
    got, want = deployed_run(cluster, make, program)
    assert want[:5] == [True, True, True, True, True]
    assert got[:6] == want[:6]
    np.testing.assert_allclose(got[6], want[6], rtol=1e-5, atol=1e-6)


def hooked(model):
    """A client forward hook that replaces a placed part's output, and one that reads its
    input, run in inference mode: the hook machinery tracks what the hooks were given
    without reading an inference tensor's version (torch refuses that read)."""
    part = model[0] if isinstance(model, torch.nn.Sequential) else model.p
    seen = []
    part.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))
    part.register_forward_hook(lambda m, args, out: -out)
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    with torch.inference_mode():
        out = model(x)
    return [[tuple(s) for s in seen], out.is_inference(), out.tolist()]


@pytest.mark.parametrize("make", [chain, tree], ids=["chain", "tree"])
def test_client_hooks_of_a_deployed_model_run_in_inference_mode(cluster, make):
    got, want = deployed_run(cluster, make, hooked)
    assert got[:2] == want[:2]
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)
