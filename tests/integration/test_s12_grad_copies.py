"""Each connection of a client keeps gradients of its own on a stage it runs backward
through. With keys the caps are a key's, so opening more connections gets no more room;
but a key's gradient copies were not weighed at all: 30 connections of one key that each
ran a backward through a published model of 8 MiB of weights grew its worker by 259 MiB
(/tmp probe), and a model of 1 GiB would have taken 30 GiB. Now one copy per stage is the
key's, as in one process, and each copy more counts with its kept graphs against
``--max-graph-mb``: past it the request that would make one is refused, saying so."""
import contextlib
import subprocess
import sys
import tempfile

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, connect
from disthook.service.security import add_client, generate

pytestmark = pytest.mark.timeout(180)


@contextlib.contextmanager
def _secure_worker(*flags: str):
    """A coordinator and a worker with keys (the worker with ``flags``): the key directory
    and the coordinator's address."""
    keys = tempfile.mkdtemp()
    generate(keys)
    add_client(keys, "bob")
    common = ["--keys", keys, "--log-level", "WARNING"]
    coordinator = subprocess.Popen([sys.executable, "-m", "coordinator", "--bind",
                                    "tcp://127.0.0.1:0", *common], stdout=subprocess.PIPE,
                                   text=True)
    procs = [coordinator]
    try:
        address = coordinator.stdout.readline().split()[-1]
        procs.append(subprocess.Popen([sys.executable, "-m", "workers", "--coordinator",
                                       address, *common, *flags], stdout=subprocess.PIPE,
                                      text=True))
        with connect(address, keys=keys, timeout=30) as admin:
            admin.wait_for_workers(1, timeout=60)
        yield keys, address
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(10)


def test_a_keys_connections_keep_one_copy_of_a_stages_gradients_free_the_others_weighed():
    with _secure_worker("--max-graph-mb", "6") as (keys, address), \
            connect(address, keys=keys, timeout=30) as admin:
        torch.manual_seed(0)
        admin.deploy(nn.Sequential(nn.Linear(1024, 1024)), stages=1, name="s12-grads")  # 4 MiB
        x = torch.randn(2, 1024)
        with contextlib.ExitStack() as stack:
            bobs = [stack.enter_context(connect(address, keys=keys, key_name="bob",
                                                timeout=30)).attach("s12-grads")
                    for _ in range(3)]
            bobs[0](x).sum().backward()  # the key's copy: free
            bobs[1](x).sum().backward()  # a copy more: 4 MiB of its 6
            with pytest.raises(RemoteError, match=r"RuntimeError: this client's connections "
                                                  r"hold gradients of stage 0 .* a copy more "
                                                  r".*\(--max-graph-mb\)"):
                bobs[2](x).sum().backward()  # before: taken, unweighed
            bobs[1].zero_grad()  # (set to None: that copy goes)
            bobs[2](x).sum().backward()
            assert bobs[2][0].weight.grad is not None
            with pytest.raises(RemoteError, match="a copy more"):
                bobs[1](x).sum().backward()
            bobs[0](x).sum().backward()  # a connection that has its copy adds to it
        # the admin's key, one connection: its copy is free whatever its size
        deployed = admin.attach("s12-grads")
        deployed(x).sum().backward()
