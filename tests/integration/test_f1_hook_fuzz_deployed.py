"""Differential fuzzing of hook semantics on a deployed model: random small programs that use
hooks (``f1_programs.generate(seed, deployable=True)``: no global module hooks, no
saved-tensor hooks, no Node hooks, no post-accumulate hooks on the model's parameters, which
a deployed model refuses as docs/hooks.md says), each run in one process and with its model
deployed on 2 workers, their logs compared (``f1_programs.compare_deployed``).

A case passes when the logs are the same, when the deployed run refused something with
NotImplementedError where one process went on (a refusal that says so), or when the hooks of
a backward fired in another order with the same arguments (a worker runs its stage's
backward whole before the stage before it starts; one process interleaves the stages), or
when the deployed run warned of a difference that docs/hooks.md names (the hooks of a
parameter that several calls use fire once per call under ``autograd.grad`` or
``backward(inputs=)`` naming it; a backward that a hook's error stopped elsewhere than one
process would: ``f1_programs.WARNED_DIFFERENCES``).

The default run takes ``F1_FUZZ_DEPLOYED_CASES`` programs (8) from seed
``F1_FUZZ_DEPLOYED_SEED`` (0); more by hand, e.g. ``F1_FUZZ_DEPLOYED_CASES=400 python -m
pytest -q -p no:cacheprovider tests/integration/test_f1_hook_fuzz_deployed.py``.
"""
from __future__ import annotations

import os

import f1_programs as programs
import pytest

import disthook

CLUSTER_WORKERS = 2
FIRST = int(os.environ.get("F1_FUZZ_DEPLOYED_SEED", "0"))
CASES = int(os.environ.get("F1_FUZZ_DEPLOYED_CASES", "8"))
# F1_FUZZ_DEPLOYED_EXTRAS=1: the rounds add f1_programs.EXTRAS too (custom Functions on the
# output, multi-grad hooks, save_on_cpu, ...)
EXTRAS = os.environ.get("F1_FUZZ_DEPLOYED_EXTRAS") == "1"

pytestmark = pytest.mark.timeout(300)


def _deployed_log(cluster, program, warned: list) -> list:
    placed = []

    def deploy(model):
        try:
            remote = cluster.deploy(model, stages=2)
        except ValueError as e:  # one part with parameters: it cannot be cut in two
            if "deploy fewer stages" not in str(e):
                raise
            remote = cluster.deploy(model, stages=1)
        placed.append(remote)
        return remote

    try:
        return programs.run(disthook, program, deploy=deploy, warned=warned)
    finally:
        for remote in placed:
            remote.close()


@pytest.mark.parametrize("seed", range(FIRST, FIRST + CASES), ids=lambda s: f"seed_{s}")
def test_a_random_hook_program_logs_deployed_as_in_one_process(cluster, seed):
    program = programs.generate(seed, deployable=True, extras=EXTRAS)
    want = programs.run(disthook, program)
    warned = []
    got = _deployed_log(cluster, program, warned)
    status, difference = programs.compare_deployed(got, want, warned)
    assert status in ("same", "refused", "order", "warned"), f"seed {seed}: {difference}"


def test_the_deployed_comparison_tells_an_order_from_a_value():
    import numpy as np

    a, b = ("h0:param", "w", np.ones(2)), ("h1:bwd", "m", (np.ones(2),), (None,))
    log = [("out", np.ones(2)), a, ("ret", "h0:param", None), b, ("ret", "h1:bwd", None),
           ("grad", "w", np.ones(2))]
    swapped = [log[0], *log[3:5], *log[1:3], log[5]]
    assert programs.compare_deployed(log, log) == ("same", None)
    assert programs.compare_deployed(swapped, log)[0] == "order"
    changed = [*log[:5], ("grad", "w", np.zeros(2))]
    assert programs.compare_deployed(changed, log)[0] == "differs"
    refused = [log[0], ("error", "backward", "RemoteNotImplementedError")]
    assert programs.compare_deployed(refused, log)[0] == "refused"
    # in the forward (before "out") the order counts
    assert programs.compare_deployed([a, b, log[0]], [b, a, log[0]])[0] == "differs"
