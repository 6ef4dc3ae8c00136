"""``placement_of``: a module's placement belongs to the module it was made for. A module
whose ``__dict__`` was copied from a placed one (higher's monkeypatched copies) is a plain
module; the copied entry is dropped (tests/integration/test_r25_module_dict_copies.py runs
the programs)."""
from disthook import nn
from disthook.nn.modules.module import Placement, placement_of


def test_a_placement_is_its_owners_and_a_copied_one_is_dropped():
    owner, copy = nn.Linear(2, 2), object.__new__(nn.Linear)
    placement = Placement().own(owner)
    owner.__dict__["_placement"] = placement
    copy.__dict__.update(owner.__dict__)
    assert placement_of(owner) is placement
    assert placement_of(copy) is None and "_placement" not in copy.__dict__
    assert placement_of(owner) is placement  # the owner keeps it
    assert placement_of(nn.Linear(2, 2)) is None


def test_a_copied_placement_is_not_asked_for_the_copys_attributes():
    """``Module.__setattr__`` and ``__getattr__`` of the copy do not go to the placement."""
    asked = []

    class Recording(Placement):
        def set_attr(self, module, name, value):
            asked.append(("set", name))
            return True

        def attribute(self, module, name):
            asked.append(("get", name))
            return 1

    owner = nn.Linear(2, 2)
    owner.__dict__["_placement"] = Recording().own(owner)
    copy = object.__new__(nn.Linear)
    copy.__dict__.update(owner.__dict__)
    copy.note = "mine"
    assert copy.note == "mine" and not hasattr(copy, "other")
    assert asked == []
    owner.note = "owner's"
    assert asked == [("set", "note")]
