"""Model classes from the user's own files deploy: a class in the main script and a class in
a module beside the script travel pickled by value with the model (workers import neither,
so a script without a __main__ guard deploys as well); a worker that takes no code (a shared
service's) refuses them, and classes of the main script cannot come as data."""
import subprocess
import sys
import textwrap

import pytest
from clusters import worker

pytestmark = pytest.mark.timeout(180)

MODULE = '''
import disthook as torch


class Scale(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor
'''

SCRIPT = '''
import copy

import disthook as torch
from disthook.distributed import local_cluster
from user_layers import Scale


class Twice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * 2


def main():
    torch.manual_seed(0)
    net = torch.nn.Sequential(Twice(), Scale(0.5), torch.nn.Tanh())
    x = torch.randn(2, 3)
    with local_cluster(workers=2) as cluster:
        remote = cluster.deploy(copy.deepcopy(net), stages=2)
        out = remote(x)
        out.sum().backward()
        net(x).sum().backward()
        same = torch.allclose(remote[0].lin.weight.grad, net[0].lin.weight.grad)
        print("same output", torch.allclose(out, net(x)), "same grad", same)


GUARD
'''


def run(tmp_path, guard: str) -> subprocess.CompletedProcess:
    (tmp_path / "user_layers.py").write_text(MODULE)
    (tmp_path / "script.py").write_text(textwrap.dedent(SCRIPT).replace("GUARD", guard))
    return subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=150)


def test_classes_of_the_main_script_and_a_module_beside_it_deploy(tmp_path):
    proc = run(tmp_path, 'if __name__ == "__main__":\n    main()')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "same output True same grad True"


def test_a_script_without_the_main_guard_deploys(tmp_path):
    """The workers never import the script: its unguarded call of main() runs here only."""
    proc = run(tmp_path, "main()")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "same output True same grad True"


def test_a_worker_refuses_code_unless_allowed(tmp_path):
    """``disthook worker`` started by hand runs no client's code unless --allow-code, and a
    class of a client's script cannot come as data (workers never import scripts)."""
    from disthook import nn
    from disthook.distributed import RemoteError, shipping
    from disthook.distributed.spec import module_spec
    from disthook.service.rpc import Peer

    spec = module_spec(nn.Sequential(nn.Identity()))
    spec["children"]["0"]["class"] = "__main__:Twice"
    blob, arrays = shipping.dumps(nn.Sequential(nn.Linear(2, 2)))
    code = {"model": "m", "stage": 0, "code": blob, "arrays": arrays}
    with worker() as address, Peer(address) as peer:
        with pytest.raises(RemoteError, match="this worker takes no code"):
            peer.request("load_stage", code, timeout=30)
        with pytest.raises(RemoteError, match="defined in the client's main script, which "
                                              "workers never import"):
            peer.request("load_stage", {"model": "m", "stage": 0, "spec": spec}, timeout=30)
    with worker("--allow-code") as address, Peer(address) as peer:
        assert peer.request("load_stage", code, timeout=30)["result"]["parameters"] == 6


def test_a_class_from_an_interactive_session_cannot_deploy(monkeypatch):
    import types

    from disthook import nn
    from disthook.distributed.spec import SpecError, main_script_of, module_spec

    spec = module_spec(nn.Sequential(nn.Identity()))
    spec["children"]["0"]["class"] = "__main__:Net"
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    with pytest.raises(SpecError, match="interactive session"):
        main_script_of(spec)
