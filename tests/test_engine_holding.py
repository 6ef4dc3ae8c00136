"""``engine.holding_leaves``: a backward that hands a leaf's gradient to a holder, which keeps
it (the leaf's hooks and .grad wait) or gives it back summed with what it kept, so that a
later backward fires the leaf's hooks once with both (a deployed model's workers use it for
a parameter that several calls of one forward use)."""
import disthook as torch
from disthook.autograd import engine


class Keeper:
    def __init__(self, leaf, keep: bool, kept=None):
        self.leaves = {id(leaf)}
        self.keep, self.kept = keep, kept

    def take(self, leaf, grads):
        if self.keep:
            self.kept = grads[0]
            return None
        return [grads[0] + self.kept]


def test_a_kept_gradient_reaches_the_hooks_once_with_the_next():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    seen, after = [], []
    w.register_hook(lambda g: seen.append(g.tolist()))
    w.register_post_accumulate_grad_hook(lambda p: after.append(p.grad.tolist()))
    first = Keeper(w, keep=True)
    with engine.holding_leaves(first):
        (w * 3).sum().backward()
    assert seen == [] and after == [] and w.grad is None
    with engine.holding_leaves(Keeper(w, keep=False, kept=first.kept)):
        (w * w).sum().backward()
    assert seen == [[5.0, 7.0]] and after == [[5.0, 7.0]] and w.grad.tolist() == [5.0, 7.0]


def test_only_the_next_backward_holds_and_other_leaves_run_as_usual():
    w = torch.tensor([1.0], requires_grad=True)
    v = torch.tensor([1.0], requires_grad=True)
    with engine.holding_leaves(Keeper(w, keep=True)):
        (w * v * 2).sum().backward()
    assert w.grad is None and v.grad.tolist() == [2.0]
    (w * 2).sum().backward()  # outside: the holder is gone
    assert w.grad.tolist() == [2.0]
