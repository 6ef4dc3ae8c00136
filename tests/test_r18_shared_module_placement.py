"""Placement over a module tree where one module is held at two paths (an embedding shared by
an encoder and a decoder, both children of the deployed root): the automatic placement sees
both paths and keeps them on one stage. Before, it walked each module once and stopped with
a KeyError on the second path."""
from disthook import nn
from disthook.distributed import tree


def _root():
    shared = nn.Embedding(10, 6)
    enc = nn.ModuleDict({"embed_tokens": shared, "fc": nn.Linear(6, 6)})
    dec = nn.ModuleDict({"embed_tokens": shared, "fc": nn.Linear(6, 6)})
    return nn.ModuleDict({"encoder": enc, "decoder": dec})


def test_a_module_at_two_paths_goes_to_one_stage_under_both():
    root = _root()
    placement = tree.auto_placement(root, 2)
    assert placement["encoder.embed_tokens"] == placement["decoder.embed_tokens"]
    assert set(placement.values()) == {0, 1}
    lay = tree.layout(root, placement, 2)
    assert lay.stage_of("decoder.embed_tokens.weight") == lay.stage_of(
        "encoder.embed_tokens.weight")
