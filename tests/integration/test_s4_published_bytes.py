"""What one client's published records may hold on the coordinator is capped by bytes, as
decoded, not only by count: a record's structure is data the client chooses, and 1 MiB of
empty msgpack maps decodes into about 72 MiB of objects (10 such records grew the
coordinator by 724 MiB; 64, the count cap, would have been 4.6 GiB per client)."""
import pytest

from disthook import nn
from disthook.distributed import RemoteError
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


def test_a_clients_published_records_are_capped_in_bytes(cluster):
    remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s4-pub")
    with Peer(cluster.address) as peer:
        record = dict(peer.request("lookup", {"name": "s4-pub"}, timeout=30)["result"])
        record["structure"] = {"x": [{}] * ((1 << 20) - 2048)}  # (a header of 1 MiB)
        for i in range(3):
            peer.request("publish", {"record": {**record, "name": f"s4-bulky-{i}"}},
                         timeout=60)
        with pytest.raises(RemoteError, match=r"RuntimeError: this client's published "
                                              r"records hold 215 MiB here, and this one "
                                              r"\(71 MiB as decoded\) would pass the cap of "
                                              r"256 MiB"):
            peer.request("publish", {"record": {**record, "name": "s4-bulky-3"}}, timeout=60)
        names = [m["name"] for m in peer.request("models", timeout=30)["result"]]
        assert "s4-bulky-3" not in names and "s4-bulky-2" in names
    remote.close()
