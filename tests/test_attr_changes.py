"""workers/attr_changes.py without processes: what a snapshot's diff reports of a part's
modules (names set, rebound, deleted; values that cannot travel; Module's own left out),
and the record it makes passes the wire's check."""
import disthook as torch
from disthook import nn, wire
from workers import attr_changes


class Part(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.calls, self.keep, self.gone = 0, "same", 1.5


def test_nothing_changed_reports_nothing():
    part = Part()
    snap = attr_changes.snapshot(part, "blocks.0")
    part.inner(torch.ones(1, 2))
    part.keep = "same"  # the same object again: not a change
    part.train()  # its mode has its own path
    part.register_forward_hook(lambda *a: None)  # so do its hooks
    assert snap.changes() is None


def test_set_rebound_deleted_and_opaque_by_module_path():
    part = Part()
    snap = attr_changes.snapshot(part, "blocks.0")
    part.calls += 1
    part.new = torch.ones(2)
    del part.gone
    part.inner.note = (1, "a")
    part.post = lambda t: t
    changes = wire.checked("list[attr_change]", snap.changes(), "test")
    by_path = {c["path"]: c for c in changes}
    assert set(by_path) == {"blocks.0", "blocks.0.inner"}
    top = by_path["blocks.0"]
    assert top["set"]["calls"] == 1 and top["set"]["new"]["tensor"].tolist() == [1, 1]
    assert top["deleted"] == ["gone"] and top["opaque"] == {"post": "a function"}
    assert by_path["blocks.0.inner"]["set"]["note"] == {"tuple": [1, "a"]}


def test_a_tensor_with_a_graph_is_given_to_the_packer():
    part = Part()
    snap = attr_changes.snapshot(part, "")
    part.aux = part.inner(torch.ones(1, 2)).sum()
    part.plain = torch.zeros(1)
    with_graph = attr_changes.WithGraph()
    (change,) = snap.changes(with_graph)
    assert with_graph.tensors == [part.aux] and change["set"]["plain"]["tensor"].shape == (1,)
    with_graph.fill(iter([{"kept": "c.1", "shape": [], "dtype": "float32"}]))
    assert change["set"]["aux"] == {"kept": "c.1", "shape": [], "dtype": "float32"}


def test_merged_keeps_the_earlier_stages_first():
    assert attr_changes.merged(None, None) is None
    assert attr_changes.merged([{"path": "0"}], [{"path": "1"}]) == [{"path": "0"},
                                                                       {"path": "1"}]
    assert attr_changes.merged([], [{"path": "1"}]) == [{"path": "1"}]


def test_news_tell_each_change_once_and_what_was_undone():
    """A pass's hook events carry only what the earlier ones did not; a name set and then
    deleted in the pass is told deleted, by the next news and by the pass's answer."""
    part = Part()
    snap = attr_changes.snapshot(part, "p")
    part.calls = 1
    assert snap.changes(news=True)[0]["set"] == {"calls": 1}
    assert snap.changes(news=True) is None
    part.tmp = 3
    del part.gone
    (news,) = snap.changes(news=True)
    assert news["set"] == {"tmp": 3} and news["deleted"] == ["gone"]
    del part.tmp
    assert snap.changes(news=True)[0]["deleted"] == ["tmp"]
    (final,) = snap.changes()
    assert final["set"] == {"calls": 1} and sorted(final["deleted"]) == ["gone", "tmp"]


class Holds(nn.Module):
    def __init__(self):
        super().__init__()
        self.maps, self.stats, self.nest = [], {"n": 0}, ({"a": [1]},)


def test_lists_and_dicts_changed_in_place():
    """A list that grew sends its new items from where it grew; any other change in place
    (a dict's item, a list inside a tuple) the whole value, named in_place; the same object
    rebound to an equal copy is no in-place change."""
    part = Holds()
    snap = attr_changes.snapshot(part, "p")
    assert snap.changes() is None
    part.maps.append(torch.ones(2))
    part.stats["n"] += 1
    part.nest[0]["a"].append(2)
    (change,) = wire.checked("list[attr_change]", snap.changes(), "test")
    assert change["in_place"] == ["stats", "nest"]
    assert change["set"]["stats"] == {"dict": {"n": 1}}
    assert change["set"]["nest"] == {"tuple": [{"dict": {"a": {"list": [1, 2]}}}]}
    start, items = change["grown"]["maps"]
    assert start == 0 and items["list"][0]["tensor"].tolist() == [1, 1]
    snap = attr_changes.snapshot(part, "p")
    part.maps.pop()
    part.stats = dict(part.stats)
    (change,) = snap.changes()
    assert change["in_place"] == ["maps"] and change["set"] == {"stats": {"dict": {"n": 1}},
                                                               "maps": {"list": []}}


def test_a_grown_list_is_told_by_each_hook_event_from_where_it_grew():
    part = Holds()
    part.maps.append(1)
    snap = attr_changes.snapshot(part, "p")
    part.maps.append(2)
    assert snap.changes(news=True)[0]["grown"] == {"maps": [1, {"list": [2]}]}
    part.maps.append(3)
    assert snap.changes(news=True)[0]["grown"] == {"maps": [1, {"list": [2, 3]}]}
    assert snap.changes()[0]["grown"] == {"maps": [1, {"list": [2, 3]}]}


def test_a_tensor_attribute_changed_in_place_is_sent_whole():
    part = Part()
    part.seen = torch.zeros(1)
    snap = attr_changes.snapshot(part, "p")
    part.seen += 1
    (change,) = snap.changes()
    assert change["in_place"] == ["seen"] and change["set"]["seen"]["tensor"].tolist() == [1]
