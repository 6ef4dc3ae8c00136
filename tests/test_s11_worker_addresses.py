"""The coordinator tells each worker, as workers register, the addresses and local links of
the registered ones (the only addresses a client may have a worker dial: send_value, load_stage's
neighbours, tests/integration/test_s11_send_value_to.py). The list is bounded in bytes, so
neither the answer to a registration nor the message pass the header's cap, however many
registered (without keys any peer may register one, at an address as long as it likes)."""
from disthook import wire


def _register(c, wid, address, link=None):
    return c.on_register(wire.Message("register", fields={
        "worker": wid, "pid": 1, "address": address, "link": link}), wid.encode())


def test_registrations_tell_the_live_workers_addresses_in_bounded_bytes():
    from coordinator.server import MAX_WORKER_ADDRESS_BYTES, Coordinator

    c = Coordinator("tcp://127.0.0.1:0")
    try:
        _register(c, "w0", "tcp://127.0.0.1:1")
        got = _register(c, "w1", "tcp://127.0.0.1:2", link="/run/w1.sock")["workers"]
        assert got == ["/run/w1.sock", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]
        c.workers["w0"].last_seen -= 10 * c.lost_after  # silent (a long job): still told
        assert "tcp://127.0.0.1:1" in _register(c, "w2", "tcp://127.0.0.1:3")["workers"]
        for i in range(40):
            _register(c, f"x{i}", f"tcp://{'h' * 30000}{i}:1")
        told = _register(c, "last", "tcp://127.0.0.1:4")["workers"]
        assert "tcp://127.0.0.1:4" in told  # the latest first
        assert sum(map(len, told)) <= MAX_WORKER_ADDRESS_BYTES
        head = wire.encode("ok", {"result": {"heartbeat": 1.0, "workers": told}})[0]
        assert len(head) < wire.DEFAULT_LIMITS.max_header_bytes
    finally:
        c.close()
