"""A key pair's secret is never shown: ``repr`` of the ``Keys`` a process holds (printed by a
program, or by a traceback that shows its frames' locals: pytest ``-l``, rich, a debugger)
showed the secret key whole, which is all anyone needs to connect as that client."""
import dataclasses

from disthook.service.security import Keys, add_client, generate


def test_the_repr_of_keys_holds_no_secret(tmp_path):
    generate(str(tmp_path))
    add_client(str(tmp_path), "alice")
    for name in ("server", "client", "alice"):
        keys = Keys.load(str(tmp_path), name)
        assert len(keys.secret) == 40
        for shown in (repr(keys), str(keys), f"{keys}", repr([keys]), repr({"k": keys})):
            assert keys.secret.decode() not in shown, name
            assert "secret" not in shown
        assert keys.public.decode() in repr(keys)  # public keys are no secret: still shown
        # the secret is still there for the sockets, and copies keep it
        assert dataclasses.replace(keys, name="x").secret == keys.secret
