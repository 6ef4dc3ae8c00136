"""What the differential hook fuzzer's sixth round (test_f1_hook_fuzz_deployed.py) found on
deployed models, each as the small program it came down to.

A forward hook with ``always_call=True`` that raises while the module's forward raises
(seed 1022 with F1_FUZZ_DEPLOYED_EXTRAS=1: a call with the wrong width, the hook reading
its output, None): in one process the forward's own error propagates and the hook's is
silenced with a warning. The worker did the same, but the client, which had seen its hook
fail, raised the hook's error (AttributeError) in place of the forward's (RuntimeError).
Now the client raises its hook's error only where the worker's answer is that error."""
import warnings

import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def _a_call_that_raises_with_an_always_call_hook_that_raises(model) -> tuple:
    model[0].register_forward_hook(lambda m, args, out: out.retain_grad(),
                                   always_call=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception) as raised:
            model(torch.ones(2, 4))
    silenced = [w for w in caught if "always_call=True" in str(w.message)]
    return raised.value, silenced


@pytest.mark.parametrize("deployed", [False, True])
def test_an_always_call_hook_s_error_is_silenced_by_the_forward_s(cluster, deployed):
    model = nn.Sequential(nn.Linear(3, 3))
    if deployed:
        model = cluster.deploy(model, stages=1)
    try:
        error, silenced = _a_call_that_raises_with_an_always_call_hook_that_raises(model)
        assert isinstance(error, RuntimeError), repr(error)  # the forward's, as torch's
        assert "retain_grad" in str(silenced[0].message)
        assert len(silenced) == 1
    finally:
        if deployed:
            model.close()
