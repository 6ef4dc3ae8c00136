"""The coordinator's registry file: what is saved reads back, checked as a message is; a
damaged file or entry is dropped with a reason, never a crash."""
import msgpack

from coordinator import registry_store
from disthook import wire

RECORD = {"name": "m", "model": "Sequential-1", "class": "disthook.nn:Sequential",
          "owner": "client 1", "created": 1.5, "writable": False,
          "workers": [{"stage": 0, "worker": "w0", "address": "tcp://127.0.0.1:9"}],
          "layout": {"kind": "chain", "stages": [["0"]], "split": [], "client": [],
                     "chunks": 1, "schedule": "gpipe"}}


def test_saved_entries_read_back(tmp_path):
    path = str(tmp_path / "registry")
    registry_store.save(path, [(RECORD, "alice"), ({**RECORD, "name": "n"}, None)])
    entries, dropped = registry_store.load(path)
    assert dropped == []
    assert [(r["name"], r["workers"][0]["worker"], k) for r, k in entries] == [
        ("m", "w0", "alice"), ("n", "w0", None)]


def test_no_file_is_an_empty_registry_and_a_damaged_one_is_dropped(tmp_path):
    assert registry_store.load(str(tmp_path / "none")) == ([], [])
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xc1 not msgpack")
    entries, dropped = registry_store.load(str(bad))
    assert entries == [] and "not a registry file" in dropped[0]
    path = str(tmp_path / "registry")
    log = registry_store.RegistryLog(path, list)
    log.put(RECORD, None)
    log._append(registry_store._framed({"owner_key": None, "op": "put", "frames": [b"junk"]}))
    entries, dropped = registry_store.load(path)
    assert len(entries) == 1 and dropped and "record 1" in dropped[0]


def test_a_file_of_the_format_before_the_log_is_read(tmp_path):
    old = tmp_path / "registry"
    old.write_bytes(msgpack.packb({"format": 1, "models": [
        {"owner_key": "alice", "frames": [bytes(f) for f in wire.encode(
            "publish", {"record": RECORD})]},
        {"owner_key": None, "frames": [b"junk"]}]}, use_bin_type=True))
    entries, dropped = registry_store.load(str(old))
    assert [(r["name"], k) for r, k in entries] == [("m", "alice")]
    assert dropped and "entry 1" in dropped[0]
    log = registry_store.RegistryLog(str(old), list)
    assert [r["name"] for r, _ in log.load()[0]] == ["m"]  # written afresh, as a log
    log.put({**RECORD, "name": "n"}, None)
    assert [r["name"] for r, _ in registry_store.load(str(old))[0]] == ["m", "n"]
