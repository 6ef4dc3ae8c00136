"""A client forward hook on a deployed model whose result is computed from a tensor of the
client that requires grad besides the tensors the hook was given (a steering vector being
learned, an SAE spliced in, ROME's delta): the worker's backward takes the gradient to the
hook's own tensors only, so that tensor's gradient is lost where one process gives it one.
Until it is carried, the client warns rather than leave ``.grad`` silently None; a hook whose
result comes from its own tensors, a leaf it returns, and a forward under no_grad stay
silent."""
import warnings

import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Three(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def test_a_hook_result_from_a_client_tensor_that_requires_grad_warns(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(Three(), stages=2)
    x = torch.ones(2, 3)
    try:
        delta = torch.zeros(4, requires_grad=True)

        def steer(module, args, out):
            out = out.clone()
            out[:, -1] = out[:, -1] + delta[-1]
            return out

        handle = remote.b.register_forward_hook(steer)
        with pytest.warns(RuntimeWarning, match=r"forward hook 'steer' on 'b' of a deployed "
                                                r"model gave a tensor computed from a tensor"):
            remote(x).sum().backward()
        handle.remove()
        leaf = torch.ones(2, 4, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for hook in (lambda m, a, o: o * 2, lambda m, a, o: leaf):
                handle = remote.b.register_forward_hook(hook)
                remote(x).sum().backward()
                handle.remove()
            assert leaf.grad is not None  # a leaf it returns gets its gradient
            handle = remote.b.register_forward_hook(steer)
            with torch.no_grad():
                remote(x)
            handle.remove()
    finally:
        remote.close()
