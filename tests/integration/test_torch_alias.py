"""A program that aliases torch to disthook (sys.modules) and imports its model from a file
that says ``import torch``: its workers import that file with the same alias, so the model
deploys and computes what it computes in one process."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

MODEL = textwrap.dedent("""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            return F.relu(self.fc(x)) + x
""")

CLIENT = textwrap.dedent("""
    import sys
    import disthook
    import disthook.nn
    import disthook.nn.functional
    sys.modules.update({"torch": disthook, "torch.nn": disthook.nn,
                        "torch.nn.functional": disthook.nn.functional})
    import torch
    from torch import nn
    from tmodel import Block
    from disthook.distributed import local_cluster

    torch.manual_seed(0)
    net = nn.Sequential(Block(), Block(), nn.Linear(6, 2))
    x = torch.randn(3, 6)
    expected = net(x)
    with local_cluster(workers=2) as cluster:
        remote = cluster.deploy(net, stages=2)
        got = remote(x)
        print("difference", float((got - expected).abs().max()))
""")


def test_workers_import_the_model_file_with_the_clients_torch_alias(tmp_path):
    pytest.importorskip("torch")  # without the real torch the alias would not be tested
    (tmp_path / "tmodel.py").write_text(MODEL)
    (tmp_path / "client.py").write_text(CLIENT)
    run = subprocess.run([sys.executable, "client.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=100)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "difference 0.0", run.stdout + run.stderr


def test_only_aliases_of_disthook_modules_are_installed():
    from disthook.distributed import aliases

    with pytest.raises(ValueError, match="not an alias of a disthook module"):
        aliases.install({"json": "os"})
    with pytest.raises(ValueError, match="not an alias of a disthook module"):
        aliases.install({"disthook": "disthook.nn"})
    with pytest.raises(ImportError, match="already means 'json'"):
        aliases.install({"json": "disthook"})
