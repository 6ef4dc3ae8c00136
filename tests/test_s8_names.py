"""Published names that differ from a live one only in spaces: ``'mlp '`` (a trailing
space), ``' mlp'``, ``'s8  mlp'`` beside ``'s8 mlp'``. ``models()`` and ``disthook models``
print them as the live name reads (a space at either end does not show; a run of spaces
reads as one), and a client that copied the name with the space attached to the other
client's model, which sees its inputs. They were taken as different names; now a name
reads as the live one once its spaces at either end are dropped and each run of spaces is
one, and is refused (``PermissionError``, ``NameTaken`` at the client) as any other name
that reads as a live one."""
import pytest
from test_registry import ask, published

from coordinator.server import Coordinator


@pytest.fixture
def registry():
    """A coordinator without sockets' peers, one worker w0 registered (test_registry's)."""
    served = Coordinator("tcp://127.0.0.1:0")
    ask(served, "register", b"worker", worker="w0", pid=1, address="tcp://127.0.0.1:1")
    yield served
    served.close()


CASES = [("mlp", "mlp "), ("mlp", " mlp"), ("mlp", "MLP  "), ("s8 mlp", "s8  mlp"),
         ("s8 mlp", " s8   MLP ")]


@pytest.mark.parametrize(("live", "alike"), CASES)
def test_a_name_that_differs_from_a_live_one_in_spaces_only_is_refused(registry, live, alike):
    ask(registry, "publish", b"alice", record=published(name=live))
    with pytest.raises(PermissionError, match=f"the name {alike!r} reads as {live!r}, "
                                              "published by client 1 and live"):
        ask(registry, "publish", b"eve", record=published(name=alike, model="Sequential-2"))
    ask(registry, "publish", b"eve", record=published(name="s8 m lp", model="Sequential-3"))
    assert sorted(m["name"] for m in ask(registry, "models", b"bob")) == sorted(
        [live, "s8 m lp"])
