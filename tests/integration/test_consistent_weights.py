"""Each call computes every stage with one version of the weights (issue 32): a reader's
call in flight while the deployer steps its optimizer (the step riding on a forward) or
loads a state dict sees the weights as they were when it started, on both stages (checked
by values); the deployer's write never waits for the reader's slow hook; and the deployer's
own weight edit inside its own forward pre-hook is what that forward computes with, as in
one process."""
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster
from disthook.service.security import add_client

pytestmark = pytest.mark.timeout(180)

CLUSTER_WORKERS = 2  # conftest's cluster, shared with the modules of that size
HOOK_S = 3.0  # the most a reader's call is held; the test lets it go once its write is done

READER = textwrap.dedent('''
    import json, os, sys, time
    import numpy as np
    import disthook as torch
    from disthook.distributed import connect

    address, name, where, marker, hook_s = sys.argv[1:6]
    model = connect(address).attach(name)

    def slow(module, args, out):
        open(marker, "w").close()  # the deployer writes now
        deadline = time.monotonic() + float(hook_s)
        while not os.path.exists(marker + ".go") and time.monotonic() < deadline:
            time.sleep(0.01)

    model[int(where)].register_forward_hook(slow)
    with torch.no_grad():
        out = model(torch.ones(2, 3))
    print(json.dumps(out.numpy().tolist()), flush=True)
''')


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def outputs_of(state: dict) -> np.ndarray:
    local = make_model()
    local.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.no_grad():
        return local(torch.ones(2, 3)).numpy()


class Pause(nn.Module):
    """Holds a call on its worker when the input is negative (a reader's call), after
    touching ``marker``, until ``marker``.go exists or ``seconds`` have passed: the call
    computes there while the deployer writes."""

    def __init__(self, marker: str, seconds: float):
        super().__init__()
        self.marker, self.seconds = marker, seconds

    def forward(self, x):
        if float(x.detach().numpy().flat[0]) < 0:
            open(self.marker, "w").close()
            deadline = time.monotonic() + self.seconds
            while not Path(self.marker + ".go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return x


def paused_model(marker) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Pause(str(marker), HOOK_S), nn.Linear(3, 4), nn.Tanh(),
                         nn.Linear(4, 2))


def paused_outputs(state: dict, sign: float = -1.0) -> np.ndarray:
    local = paused_model("unused")
    local[0].seconds = 0.0
    local.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.no_grad():
        return local(torch.ones(2, 3) * sign).numpy()


PAUSED_READER = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, sys.argv[3])  # the test module: the model's classes
    import disthook as torch
    from disthook.distributed import connect

    address, name = sys.argv[1:3]
    keys = sys.argv[4] if len(sys.argv) > 4 else None
    model = connect(address, keys=keys, key_name="reader").attach(name)
    with torch.no_grad():
        out = model(torch.ones(2, 3) * -1)
    print(json.dumps(out.numpy().tolist()), flush=True)
''')


@pytest.fixture(scope="module", params=["plain", "keys"])
def any_cluster(request, cluster):
    if request.param == "plain":
        yield cluster
        return
    with local_cluster(workers=2, secure=True) as c:
        yield c


def start_paused_reader(cluster, name, marker, tmp_path):
    """A reader whose call computes on stage 0 (in ``Pause``) for HOOK_S seconds."""
    return launch_reader(cluster, tmp_path / "paused_reader.py", PAUSED_READER,
                        [name, str(Path(__file__).parent)], marker,
                        "the reader's call never reached stage 0")


def launch_reader(cluster, script, source, args, marker, never):
    """``source`` run as ``script`` with the cluster's address and ``args`` (and a key of
    its own when the cluster has keys), once it has touched ``marker``; ``never``: the
    failure's message when it does not within 60 s."""
    script.write_text(source)
    argv = [sys.executable, str(script), cluster.address, *args]
    if cluster.keys is not None:  # a key of its own: another client than the deployer
        if not (Path(cluster.keys.directory) / "reader.key").exists():
            add_client(cluster.keys.directory, "reader")
        argv.append(cluster.keys.directory)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.go = Path(f"{marker}.go")  # lets a held call go on (reader_output)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, never
        time.sleep(0.02)
    return proc


@pytest.mark.parametrize("write", ["optimizer step", "stage 1 only"])
def test_a_call_computing_on_stage_0_while_a_direct_write_lands_sees_one_version(
        any_cluster, tmp_path, write):
    # the reader's call computes on stage 0 (old weights) while the deployer's write, sent
    # to each stage by itself, reaches stage 1: the reader still computes stage 1 with the
    # weights it started with (the write goes behind it, down the pipeline)
    marker = tmp_path / "in-stage-0"
    name = f"paused-{write.split()[0]}-{any_cluster.keys is not None}"
    remote = any_cluster.deploy(paused_model(marker), stages=2, split_points=[2], name=name)
    try:
        before = snapshot(remote)
        if write == "optimizer step":  # a first step: its shares are made, sent at once
            opt = torch.optim.SGD(remote.parameters(), lr=0.5)
            remote(torch.ones(2, 3)).square().sum().backward()
        reader = start_paused_reader(any_cluster, name, marker, tmp_path)
        if write == "optimizer step":
            opt.step()
        else:
            with torch.no_grad():
                remote[3].weight.fill_(0.25)
        after = snapshot(remote)
        assert not np.allclose(after["3.weight"], before["3.weight"])
        np.testing.assert_allclose(reader_output(reader), paused_outputs(before), rtol=1e-5,
                                   atol=1e-6)
        with torch.no_grad():  # the next call computes with the new weights on both
            np.testing.assert_allclose(remote(torch.ones(2, 3)).numpy(),
                                       paused_outputs(after, 1.0), rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


def start_reader(cluster, name, where, tmp_path):
    marker = tmp_path / "in-hook"
    return launch_reader(cluster, tmp_path / "reader.py", READER,
                         [name, str(where), str(marker), str(HOOK_S)], marker,
                         "the reader's hook never fired")


def reader_output(proc) -> np.ndarray:
    """What the reader printed, once its held call is let go: the test has written by now
    (held until then, at most HOOK_S, rather than HOOK_S every time)."""
    proc.go.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return np.asarray(json.loads(out.splitlines()[-1]), np.float32)


def snapshot(remote) -> dict:
    return {k: v.detach().numpy().copy() for k, v in remote.state_dict().items()}


def test_a_call_in_flight_during_an_optimizer_step_computes_on_one_version(cluster,
                                                                            tmp_path):
    # the reader parks in its hook on stage 0, the step reaches stage 1 before it does
    remote = cluster.deploy(make_model(), stages=2, name="stepped")
    try:
        before = snapshot(remote)
        opt = torch.optim.SGD(remote.parameters(), lr=0.5)
        reader = start_reader(cluster, "stepped", 0, tmp_path)
        remote(torch.ones(2, 3)).square().sum().backward()
        opt.step()
        with torch.no_grad():
            mine = remote(torch.ones(2, 3)).numpy()  # carries the step to both stages
        after = snapshot(remote)
        assert not np.allclose(after["2.weight"], before["2.weight"])
        np.testing.assert_allclose(mine, outputs_of(after), rtol=1e-5, atol=1e-6)
        # the reader's call: the weights of its start on both stages, not half of each
        np.testing.assert_allclose(reader_output(reader), outputs_of(before), rtol=1e-5,
                                   atol=1e-6)
        with torch.no_grad():  # and the next call computes with the new ones
            np.testing.assert_allclose(remote(torch.ones(2, 3)).numpy(), outputs_of(after),
                                       rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


def test_load_state_dict_does_not_wait_for_another_clients_slow_hook(cluster, tmp_path):
    remote = cluster.deploy(make_model(), stages=2, name="loaded")
    try:
        before = snapshot(remote)
        new = {k: np.full_like(v, 0.25) for k, v in before.items()}
        reader = start_reader(cluster, "loaded", 2, tmp_path)  # parked on stage 1
        start = time.monotonic()
        remote.load_state_dict({k: torch.from_numpy(v) for k, v in new.items()})
        took = time.monotonic() - start
        assert reader.poll() is None, "the reader's hook ended before the write did"
        assert took < HOOK_S * 0.6, f"load_state_dict took {took:.2f} s behind the hook"
        np.testing.assert_allclose(reader_output(reader), outputs_of(before), rtol=1e-5,
                                   atol=1e-6)
        assert all(np.array_equal(v, new[k]) for k, v in snapshot(remote).items())
    finally:
        remote.close()


@pytest.mark.parametrize("kind", ["chain", "published tree"])
def test_the_deployers_weight_edit_in_its_own_pre_hook_is_what_its_forward_uses(cluster,
                                                                                 kind):
    def halve(module, args):
        with torch.no_grad():
            module.weight.mul_(0.5)

    if kind == "chain":
        local, remote, part = make_model(), cluster.deploy(make_model(), stages=2), "2"
    else:  # its forwards pinned, its writes numbered; the edit on the second worker
        local, part = fresh_tree(), "b"
        remote = cluster.deploy(fresh_tree(), placement={"a": 0, "b": 1}, name="own-edit")
    try:
        for model in (local, remote):
            model.get_submodule(part).register_forward_pre_hook(halve)
        start = time.monotonic()
        with torch.no_grad():
            got = [remote(torch.ones(2, 3)).numpy() for _ in range(2)]
        assert time.monotonic() - start < 5.0  # no deadline waited out
        with torch.no_grad():
            want = [local(torch.ones(2, 3)).numpy() for _ in range(2)]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(remote.get_submodule(part).weight.detach().numpy(),
                                   local.get_submodule(part).weight.detach().numpy(), rtol=1e-6)
    finally:
        remote.close()


# ---- a model whose forward runs on the client, its parts placed over its tree ---------------

class Tree(nn.Module):
    """Its own forward (run on the client), its two parts on two workers: ``a`` on the first,
    ``b`` on the second, the tanh between them on the client."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def fresh_tree() -> Tree:
    torch.manual_seed(0)
    return Tree()


def tree_outputs(state: dict) -> tuple[np.ndarray, np.ndarray]:
    """The tree's output for ones(2, 3) with ``state``, and the gradient of its squares' sum
    with respect to that input, computed here in one process."""
    local = fresh_tree()
    local.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    x = torch.ones(2, 3, requires_grad=True)
    out = local(x)
    out.square().sum().backward()
    return out.detach().numpy(), x.grad.numpy()


HELD_READER = textwrap.dedent('''
    import json, os, sys, time
    sys.path.insert(0, sys.argv[3])  # where the model's classes are
    import disthook as torch
    from disthook.distributed import connect

    address, name, _, marker, go, part, kind = sys.argv[1:8]
    keys = sys.argv[8] if len(sys.argv) > 8 else None
    model = connect(address, keys=keys, key_name="reader").attach(name)
    held = []

    def hold(module, args, out):  # the first forward waits here, between its parts
        if held:
            return
        held.append(True)
        open(marker, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(go):
            assert time.monotonic() < deadline, "the deployer never wrote"
            time.sleep(0.01)

    model.get_submodule(part).register_forward_hook(hold)
    if kind == "tree":
        x = torch.ones(2, 3, requires_grad=True)
        out = model(x)
        out.square().sum().backward()  # after the write too: the forward's weights
        first = [out.detach().numpy().tolist(), x.grad.numpy().tolist()]
        with torch.no_grad():
            second = model(torch.ones(2, 3)).numpy().tolist()
    else:  # a GPT: token ids in, logits out
        idx = torch.tensor([[1, 2, 3, 4, 5, 6]])
        with torch.no_grad():
            first = [model(idx)[0].numpy().tolist()]
            second = model(idx)[0].numpy().tolist()
    print(json.dumps([first, second]), flush=True)
''')


def start_held_reader(cluster, name, tmp_path, part="a", kind="tree",
                      classes=Path(__file__).parent):
    """A reader whose first forward of ``name`` waits in a client hook on its part at
    ``part`` until ``go`` exists; the marker says it waits."""
    marker, go = tmp_path / "held", tmp_path / "go"
    proc = launch_reader(cluster, tmp_path / "held_reader.py", HELD_READER,
                        [name, str(classes), str(marker), str(go), part, kind], marker,
                        "the reader's hook never fired")
    return proc, go


@pytest.mark.parametrize("write", ["optimizer step", "load_state_dict"])
def test_a_tree_placed_forward_held_between_its_parts_computes_on_one_version(
        any_cluster, tmp_path, write):
    # the reader's forward computed part a (worker 0) and waits in its hook; the deployer
    # writes both parts meanwhile; the reader's part b (worker 1), and the backward of
    # both, compute with the weights the forward started with
    name = f"tree-{write.split()[0]}-{any_cluster.keys is not None}"
    remote = any_cluster.deploy(fresh_tree(), placement={"a": 0, "b": 1}, name=name)
    try:
        x = torch.ones(2, 3)
        if write == "optimizer step":  # the first step makes the shares; the next one rides
            opt = torch.optim.SGD(remote.parameters(), lr=0.5)
            remote(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
        before = snapshot(remote)
        reader, go = start_held_reader(any_cluster, name, tmp_path)
        if write == "optimizer step":
            remote(x).square().sum().backward()
            opt.step()
        else:
            remote.load_state_dict({k: torch.from_numpy(np.full_like(v, 0.25))
                                    for k, v in before.items()})
        with torch.no_grad():  # the deployer's own forward sees its write (a step not
            mine = remote(x).numpy()  # sent yet goes out first)
        after = snapshot(remote)
        assert not np.allclose(after["b.weight"], before["b.weight"])
        assert not np.allclose(after["a.weight"], before["a.weight"])
        np.testing.assert_allclose(mine, tree_outputs(after)[0], rtol=1e-5, atol=1e-6)
        go.touch()
        out, err = reader.communicate(timeout=90)
        assert reader.returncode == 0, err
        (first_out, first_grad), second = json.loads(out.splitlines()[-1])
        want_out, want_grad = tree_outputs(before)
        np.testing.assert_allclose(first_out, want_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(first_grad, want_grad, rtol=1e-5, atol=1e-6)
        # the reader's next forward computes with the new weights on both workers
        np.testing.assert_allclose(second, tree_outputs(after)[0], rtol=1e-5, atol=1e-6)
    finally:
        remote.close()



EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("write", ["optimizer step", "load_state_dict"])
def test_a_gpt_forward_held_between_its_parts_computes_on_one_version(cluster, tmp_path,
                                                                      write):
    # nanoGPT-shaped: embeddings and the first block on worker 0, the other blocks and the
    # final norm on worker 1, the head (tied to the embedding) on worker 0 again; the
    # reader's forward waits after block 0 while the deployer writes every part
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import gpt

    def fresh():
        torch.manual_seed(0)
        return gpt.GPT(gpt.Config())

    def logits(state):
        local = fresh()
        local.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        with torch.no_grad():
            return local(idx)[0].numpy()

    placement = {"transformer.wte": 0, "transformer.wpe": 0, "lm_head": 0,
                 "transformer.h.0": 0, "transformer.h.1": 1, "transformer.h.2": 1,
                 "transformer.h.3": 1, "transformer.ln_f": 1}
    name = f"gpt-{write.split()[0]}"
    remote = cluster.deploy(fresh(), placement=placement, name=name)
    idx = torch.tensor([[1, 2, 3, 4, 5, 6]])
    try:
        if write == "optimizer step":  # the first step makes the shares; the next one rides
            opt = torch.optim.SGD(remote.parameters(), lr=0.5)
            remote(idx)[0].square().mean().backward()
            opt.step()
            opt.zero_grad()
        before = snapshot(remote)
        reader, go = start_held_reader(cluster, name, tmp_path, part="transformer.h.0",
                                       kind="gpt", classes=EXAMPLES)
        if write == "optimizer step":
            remote(idx)[0].square().mean().backward()
            opt.step()
        else:
            remote.load_state_dict({k: torch.from_numpy(v + 0.01) for k, v in before.items()})
        with torch.no_grad():
            mine = remote(idx)[0].numpy()
        after = snapshot(remote)
        assert not np.allclose(after["transformer.h.3.mlp.0.weight"],
                               before["transformer.h.3.mlp.0.weight"])
        np.testing.assert_allclose(mine, logits(after), rtol=1e-4, atol=1e-5)
        go.touch()
        out, err = reader.communicate(timeout=90)
        assert reader.returncode == 0, err
        (first,), second = json.loads(out.splitlines()[-1])
        np.testing.assert_allclose(first, logits(before), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(second, logits(after), rtol=1e-4, atol=1e-5)
    finally:
        remote.close()


def test_a_forward_that_starts_during_a_load_state_dict_sees_none_of_it(cluster, tmp_path):
    # a load_state_dict writes each placed part by itself; a reader's forward that runs
    # after the first part's write and before the second's computes with the old weights
    # on both parts (the load is one write for others), and after it with the new ones
    name = "tree-mid-load"
    remote = cluster.deploy(fresh_tree(), placement={"a": 0, "b": 1}, name=name)
    try:
        before = snapshot(remote)
        new = {k: np.full_like(v, 0.25) for k, v in before.items()}
        (tmp_path / "go").touch()  # the reader's hook does not wait
        seen = []

        def after_part_a(module, incompatible):  # the load is half made here
            if not seen:
                reader, _ = start_held_reader(cluster, name, tmp_path)
                seen.append(reader.communicate(timeout=90))
                assert reader.returncode == 0, seen[0][1]

        remote.a.register_load_state_dict_post_hook(after_part_a)
        remote.load_state_dict({k: torch.from_numpy(v) for k, v in new.items()})
        assert seen, "the load's post-hook on part a did not run"
        (first_out, _), second = json.loads(seen[0][0].splitlines()[-1])
        np.testing.assert_allclose(first_out, tree_outputs(before)[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(second, tree_outputs(before)[0], rtol=1e-5, atol=1e-6)
        (tmp_path / "held").unlink()
        reader, _ = start_held_reader(cluster, name, tmp_path)  # after it: all of it
        out, err = reader.communicate(timeout=90)
        assert reader.returncode == 0, err
        (first_out, _), _ = json.loads(out.splitlines()[-1])
        np.testing.assert_allclose(first_out, tree_outputs(new)[0], rtol=1e-5, atol=1e-6)
    finally:
        remote.close()
