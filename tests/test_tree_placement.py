"""Placement over the module tree (disthook.distributed.tree), pure: which parts go whole to
which stage, which run on the client, tied weights kept together, and the errors."""
import sys
from pathlib import Path

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gpt  # examples/gpt.py: the model of the GPT example


def small_gpt(layers=4):
    return gpt.GPT(gpt.Config(layers=layers))


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_auto_placement_opens_the_tree_and_keeps_tied_parts_together(stages):
    model = small_gpt()
    placement = tree.auto_placement(model, stages)
    assert placement["transformer.wte"] == placement["lm_head"]  # one tensor, one stage
    assert sorted(set(placement.values())) == list(range(stages))
    blocks = [placement[f"transformer.h.{i}"] for i in range(4)]
    assert blocks == sorted(blocks)  # in module order
    lay = tree.layout(model, placement, stages)
    assert lay.split == ["", "transformer", "transformer.h"]
    # every parameter has exactly one place
    for name, _ in model.named_parameters():
        assert lay.stage_of(name) is not None, name


def test_layout_of_a_placement_with_parts_left_on_the_client():
    model = small_gpt()
    lay = tree.layout(model, {"transformer.h.0": 0, "transformer.h.1": 0, "transformer.h": 1,
                              "transformer.wte": 1, "lm_head": 1}, 2)
    # the nearest listed ancestor decides: h.2 and h.3 follow "transformer.h"
    assert lay.stages == [["transformer.h.0", "transformer.h.1"],
                          ["transformer.wte", "transformer.h.2", "transformer.h.3", "lm_head"]]
    assert lay.client == ["transformer.wpe", "transformer.ln_f"]
    assert lay.split == ["", "transformer", "transformer.h"]
    assert lay.stage_of("transformer.h.2.attn.qkv.weight") == 1
    assert lay.stage_of("transformer.wpe.weight") is None


def test_stage_module_keeps_full_names():
    model = small_gpt()
    held = tree.stage_module(model, ["transformer.h.1", "lm_head"])
    names = [n for n, _ in held.named_parameters()]
    assert names[0] == "transformer.h.1.ln1.weight" and names[-1] == "lm_head.weight"
    assert held.get_submodule("transformer.h.1") is model.transformer.h[1]


def test_placement_errors_name_the_place_and_the_fix():
    model = small_gpt()
    with pytest.raises(ValueError, match=r"transformer.wte.weight \(stage 0\) and "
                                         r"lm_head.weight \(stage 1\) are one tensor"):
        tree.layout(model, {"transformer": 0, "lm_head": 1}, 2)
    with pytest.raises(ValueError, match=r"\(the client\).*are one tensor"):
        tree.layout(model, {"transformer": 0}, 1)  # the head (tied) left on the client
    with pytest.raises(ValueError, match="'transformer.h.9', which is not a submodule of GPT"):
        tree.layout(model, {"transformer.h.9": 0}, 1)
    with pytest.raises(ValueError, match=r"placement\['lm_head'\] = 2: stages are numbered "
                                         "0 to 1"):
        tree.layout(model, {"lm_head": 2}, 2)
    with pytest.raises(ValueError, match="placement puts nothing on stage 1 of 2"):
        tree.layout(model, {"transformer": 0, "lm_head": 0}, 2)
    with pytest.raises(ValueError, match="cannot place Sequential on 3 stages: its tree has "
                                         "2 part"):
        tree.auto_placement(nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)), 3)


def _stage_sizes(model, placement, stages):
    mods = dict(model.named_modules())
    sizes = [0] * stages
    for path, stage in placement.items():
        sizes[stage] += sum(p.numel() for p in mods[path].parameters())
    return sizes


def test_a_model_whose_children_balance_badly_is_placed_deeper():
    """nanoGPT's layout (small embeddings, one ModuleList of every block, a small head) cut
    among the root's children puts every block on one stage; the deploy places the tree
    instead, blocks spread over the stages."""
    from disthook.bench.gpt import GPT
    from disthook.distributed import deploy

    model = GPT(width=32, layers=4)
    children = deploy._children_stages(model, 2, None, "params", None)
    assert children is not None  # the children alone could make two stages...
    coarse = [sum(p.numel() for p in m.parameters()) for m in children]
    assert max(coarse) > 0.9 * sum(coarse)  # ...with nearly everything on one of them
    finer = deploy._finer_placement(model, children, 2)
    assert finer is not None
    assert {finer[f"h.{i}"] for i in range(4)} == {0, 1}
    sizes = _stage_sizes(model, finer, 2)
    assert max(sizes) < 0.6 * sum(sizes)


def test_children_that_balance_keep_the_cut_among_children():
    class Four(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c, self.d = (nn.Linear(8, 8) for _ in range(4))

        def forward(self, x):
            return self.d(self.c(self.b(self.a(x)))) + x

    from disthook.distributed import deploy

    model = Four()
    children = deploy._children_stages(model, 2, None, "params", None)
    assert deploy._finer_placement(model, children, 2) is None
    chain = nn.Sequential(nn.Linear(2, 2), nn.Sequential(*(nn.Linear(64, 64) for _ in range(4))))
    # a chain keeps its children's stages (they run worker to worker), however they weigh
    assert deploy._finer_placement(chain, deploy._children_stages(chain, 2, None, "params",
                                                                  None), 2) is None


class _OwnWeightsAndAnActivation(nn.Module):
    """A layer with weights of its own and a stateless child (efficient-kan's KANLinear)."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, n))
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(x) @ self.weight


def test_a_part_whose_children_hold_nothing_is_placed_whole():
    model = nn.Module()
    model.layers = nn.ModuleList([_OwnWeightsAndAnActivation(4), _OwnWeightsAndAnActivation(3)])
    placement = tree.auto_placement(model, 2)
    assert placement == {"layers.0": 0, "layers.1": 1}
    lay = tree.layout(model, placement, 2)
    for name, _ in model.named_parameters():
        assert lay.stage_of(name) is not None, name
