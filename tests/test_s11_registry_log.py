"""A coordinator with ``--state`` keeps its registry as a log: a publish or an unpublish
appends what it changes and syncs it, and the log is written afresh only once it holds
twice what the registry does. Before, every change wrote the whole registry again (85 MiB
and 1.7 s a change at 25 connections of 4 records each, during which the coordinator
answered no one). What was published before a crash is never lost nor damaged: a process
killed mid-write leaves the log's last record cut short, which is dropped when it is read."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from coordinator import registry_store
from disthook import wire
from disthook.distributed import registry
from disthook.nn import Linear, Sequential

BULK = 256 << 10  # what each record carries (its structure's)
CLIENTS = 30


def record(name: str) -> dict:
    structure = registry.structure(Sequential(Linear(2, 1)))
    structure["doc"] = "x" * BULK
    return {"name": name, "model": f"Sequential-{name}", "owner": "client-1", "created": 1.0,
            "class": "disthook.nn.modules.container:Sequential", "writable": False,
            "workers": [{"stage": 0, "worker": "w0", "address": "tcp://127.0.0.1:1"}],
            "layout": {"kind": "chain", "stages": [["0"]], "split": [""], "client": [],
                       "placement": None, "chunks": 1, "schedule": "gpipe"},
            "structure": structure}


def written() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def test_a_change_writes_what_it_changes_not_the_whole_registry(tmp_path):
    from coordinator.server import Coordinator

    c = Coordinator("tcp://127.0.0.1:0", state=str(tmp_path / "registry"))
    try:
        c.on_register(wire.Message("register", fields={
            "worker": "w0", "pid": 1, "address": "tcp://127.0.0.1:1"}), b"worker")

        def ask(msg_type, sender, **fields):
            return getattr(c, f"on_{msg_type}")(wire.Message(msg_type, fields=fields), sender)

        for i in range(CLIENTS):
            ask("publish", f"c{i}".encode(), record=record(f"m{i}"))
        held = CLIENTS * BULK
        before = written()
        for _ in range(10):  # a client that publishes and unpublishes in a loop
            ask("publish", b"loop", record=record("loop"))
            ask("unpublish", b"loop", name="loop", model="Sequential-loop")
        per_change = (written() - before) / 20
        # before: the whole registry at each change (7.5 MiB); now what the change adds,
        # and at most one writing afresh of it over these 20
        assert per_change < (10 * BULK + 2 * held) / 20, (per_change, held)
    finally:
        c.close()
    again = Coordinator("tcp://127.0.0.1:0", state=str(tmp_path / "registry"))
    try:  # (a coordinator started again has them all)
        assert sorted(again.models) == sorted(f"m{i}" for i in range(CLIENTS))
    finally:
        again.close()


def test_a_cut_last_record_is_dropped_and_what_came_before_stands(tmp_path):
    path = str(tmp_path / "registry")
    held: dict = {}
    log = registry_store.RegistryLog(path, lambda: list(held.values()))
    log.load()
    for name in ("a", "b"):
        held[name] = (record(name), "alice")
        log.put(*held[name])
    log.drop("a")
    size = os.path.getsize(path)
    log.put(record("c"), None)
    with open(path, "rb") as f:
        whole = f.read()
    for cut in (size + 1, size + 5, size + 8, size + 100, len(whole) - 1):
        with open(path, "wb") as f:
            f.write(whole[:cut])
        entries, dropped = registry_store.load(path)
        assert [(r["name"], k) for r, k in entries] == [("b", "alice")], cut
        assert len(dropped) == 1 and "cut short" in dropped[0]
        again = registry_store.RegistryLog(path, list)
        assert [r["name"] for r, _ in again.load()[0]] == ["b"]
        again.put(record("d"), None)  # goes after what stands, not after the cut
        assert [r["name"] for r, _ in registry_store.load(path)[0]] == ["b", "d"]
    flipped = bytearray(whole)
    flipped[size + 20] ^= 1  # a damaged record (its CRC tells)
    with open(path, "wb") as f:
        f.write(flipped)
    entries, dropped = registry_store.load(path)
    assert [r["name"] for r, _ in entries] == ["b"] and "damaged" in dropped[0]


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from coordinator import registry_store
    from test_s11_registry_log import record
    registry_store.COMPACT_FLOOR = 1 << 20  # written afresh often: kills land there too
    held = {}
    log = registry_store.RegistryLog(sys.argv[1], lambda: list(held.values()))
    log.load()
    i = 0
    while True:
        name = f"m{i}"
        held[name] = (record(name), None)
        log.put(*held[name])
        print("put", name, flush=True)
        if i % 3 == 2:
            gone = f"m{i - 1}"
            del held[gone]
            log.drop(gone)
            print("drop", gone, flush=True)
        i += 1
""")


@pytest.mark.parametrize("after", [5, 17, 40])
def test_a_writer_killed_mid_write_loses_nothing_it_had_written(tmp_path, after):
    path = str(tmp_path / "registry")
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, here],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [os.getcwd(), here, os.environ.get("PYTHONPATH", "")])})
    done: dict[str, bool] = {}
    try:
        for _ in range(after):
            op, name = proc.stdout.readline().split()
            done[name] = op == "put"
        proc.send_signal(signal.SIGKILL)  # mid-write of the next change, or between two
    finally:
        proc.kill()
        proc.wait()
    entries, _ = registry_store.load(path)
    names = [r["name"] for r, _ in entries]
    assert len(set(names)) == len(names)
    for name, live in done.items():  # every change it had made stands
        assert (name in names) == live, (name, names)
    for r, _ in entries:  # whole, not damaged
        assert dict(r) == dict(wire.decode(wire.encode("publish", {
            "record": record(r["name"])}))["record"])
