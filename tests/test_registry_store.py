"""The coordinator's registry file: what is saved reads back, checked as a message is; a
damaged file or entry is dropped with a reason, never a crash."""
import msgpack

from coordinator import registry_store

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
    registry_store.save(path, [(RECORD, None)])
    with open(path, "rb") as f:
        data = msgpack.unpackb(f.read(), raw=False)
    data["models"].append({"owner_key": None, "frames": [b"junk"]})
    with open(path, "wb") as f:
        f.write(msgpack.packb(data, use_bin_type=True))
    entries, dropped = registry_store.load(path)
    assert len(entries) == 1 and dropped and "entry 1" in dropped[0]
