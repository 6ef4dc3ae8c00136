"""``param.register_post_accumulate_grad_hook(fn)`` on a deployed parameter: the hook fires
on the parameter's worker once its ``.grad`` was updated there, runs in the client with the
parameter itself, and what it reads and writes (``p.grad``, an optimizer step, ``p.grad =
None``) is the worker's, as in one process. Each test runs one program in one process and
deployed on 2 and 3 workers and compares the hook log and the values."""
import numpy as np
import pytest
from helpers import same_logs

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

ROWS, CHUNKS = 8, 4


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh(),
                         nn.Linear(6, 2))


class Tree(nn.Module):
    """Its forward runs on the client; its parts are placed on every worker."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.p, self.q, self.r = nn.Linear(3, 5), nn.Linear(5, 5), nn.Linear(5, 2)

    def forward(self, x):
        return self.r(torch.tanh(self.q(torch.tanh(self.p(x)))))


def _deploy(cluster, model, tree=False, **options):
    if tree:
        placement = {"p": 0, "q": 1, "r": cluster.stages - 1}
        return cluster.deploy(model, placement=placement, **options)
    return cluster.deploy(model, stages=cluster.stages, **options)


def _grad(t):
    return None if t.grad is None else t.grad.numpy().copy()


def _logging_hooks(model, log, tag):
    """A post-accumulate hook on every parameter, logging what it is given; the handles."""
    handles = {}
    for name, p in model.named_parameters():
        def hook(t, name=name):
            log.append((tag, name, t is model.get_parameter(name), torch.is_grad_enabled(),
                        _grad(t)))
        handles[name] = p.register_post_accumulate_grad_hook(hook)
    return handles


def _inputs():
    torch.manual_seed(1)
    return torch.randn(5, 3)


def _hook_log_program(model, log, before):
    """Hooks registered before the deploy (``before``: their handles) and after it, a tensor
    hook on a weight (it fires before the weight's post-accumulate hooks), three backwards:
    the second after one handle of each was removed, the third after a hook that sets its
    parameter's .grad to None."""
    after = _logging_hooks(model, log, "after")
    weight = next(name for name, _ in model.named_parameters())
    model.get_parameter(weight).register_hook(
        lambda g: log.append(("tensor hook", weight, g.numpy().copy())))
    x = _inputs()
    model(x).square().sum().backward()
    before[weight].remove()
    after[weight].remove()
    model(x).square().sum().backward()
    last = list(dict(model.named_parameters()))[-1]

    def clear(t):
        log.append(("clear", last, _grad(t)))
        t.grad = None

    model.get_parameter(last).register_post_accumulate_grad_hook(clear)
    model(x).square().sum().backward()
    log.append(("grads", [_grad(p) for p in model.parameters()]))
    return log


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_hook_log_and_grads_equal_one_process(cluster_2_or_3, tree):
    make = Tree if tree else chain
    want = []
    local = make()
    _hook_log_program(local, want, _logging_hooks(local, want, "before"))
    got = []
    model = make()
    before = _logging_hooks(model, got, "before")  # carried to the workers by the deploy
    remote = _deploy(cluster_2_or_3, model, tree)
    try:
        _hook_log_program(remote, got, before)
    finally:
        remote.close()
    assert len(got) == len(want)
    same_logs(got, want)


def _optimizer_in_backward(model, make_optimizer):
    """torch's "fuse the optimizer step into backward" recipe over three steps: the losses,
    the weights after, and each .grad (None: the hook zeroed it)."""
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step(p):
        optimizers[p].step()
        optimizers[p].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step)
    torch.manual_seed(1)
    losses = []
    for _ in range(3):
        loss = model(torch.randn(5, 3)).square().sum()
        loss.backward()
        losses.append(loss.item())
    return (losses, [p.detach().numpy().copy() for p in model.parameters()],
            [p.grad for p in model.parameters()])


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
@pytest.mark.parametrize("optimizer", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.Adam(ps, lr=0.01)], ids=["sgd", "adam"])
def test_optimizer_in_backward_trains_as_one_process(cluster_2_or_3, tree, optimizer):
    make = Tree if tree else chain
    want = _optimizer_in_backward(make(), optimizer)
    remote = _deploy(cluster_2_or_3, make(), tree)
    try:
        got = _optimizer_in_backward(remote, optimizer)
    finally:
        remote.close()
    assert want[2] == [None] * len(want[2])
    same_logs(got, want)


def test_optimizer_in_backward_under_train_step(cluster_2_or_3):
    """A chain's train_step (its stages' backward one job each) with the optimizer stepped
    in the hooks: the writes go to the parameter's stage at once, as in one process (they
    went down the chain behind the step itself, which waited for the hook: a deadlock)."""
    def program(model, step):
        optimizers = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9)
                      for p in model.parameters()}

        def hook(p):
            optimizers[p].step()
            optimizers[p].zero_grad()

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(hook)
        x, y = _data()
        losses = [float(step(model, x, y)) for _ in range(3)]
        return losses, [p.detach().numpy().copy() for p in model.parameters()]

    def one_step(model, x, y):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss.item()

    want = program(chain(), one_step)
    remote = _deploy(cluster_2_or_3, chain())
    try:
        got = program(remote, lambda m, x, y: m.train_step(x, y, nn.functional.cross_entropy))
    finally:
        remote.close()
    same_logs(got, want)


def test_zero_grad_in_the_hook_per_micro_batch(cluster_2_or_3):
    """Each micro-batch's own gradient, taken in the hook, which then zeroes it through an
    optimizer: the zeroing is done before the hook answers, not with the next forward (the
    next micro-batch's gradient would be added to the old one, and then zeroed)."""
    def hooks(model, log):
        optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}
        for name, p in model.named_parameters():
            def take(t, name=name):
                log.append((name, _grad(t)))
                optimizers[t].zero_grad()
            p.register_post_accumulate_grad_hook(take)

    (got, grads), (want, _) = _train_step_both(cluster_2_or_3, hooks, "1f1b")
    assert grads == [None] * len(grads)
    got_by, want_by = _by_parameter(got), _by_parameter(want)
    for name in want_by:
        same_logs(got_by[name], want_by[name], where=name)


def test_clipping_each_gradient_then_stepping(cluster_2_or_3):
    """Per-parameter clipping in the hook (an in-place write into .grad), then an ordinary
    optimizer step after backward."""
    def program(model):
        def clip(t):
            t.grad.clamp_(-0.05, 0.05)

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(clip)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        x = _inputs()
        out = []
        for _ in range(2):
            opt.zero_grad()
            model(x).square().sum().backward()
            out.append([_grad(p) for p in model.parameters()])
            opt.step()
        return out + [[p.detach().numpy().copy() for p in model.parameters()]]

    want = program(chain())
    remote = _deploy(cluster_2_or_3, chain())
    try:
        got = program(remote)
    finally:
        remote.close()
    assert np.abs(want[0][0]).max() == pytest.approx(0.05)  # the clamp changed something
    same_logs(got, want)


def _data():
    torch.manual_seed(1)
    return torch.randn(ROWS, 3), torch.randint(0, 2, (ROWS,))


def _train_step_both(cluster, hooks, schedule):
    """``hooks(model, log)`` on a chain stepped here micro-batch by micro-batch (train_step's
    arithmetic), and on one deployed with ``CHUNKS`` micro-batches, stepped once by
    train_step under ``schedule``: (log, grads) of the deployed one, then of the local."""
    want, got = [], []
    local = chain()
    hooks(local, want)
    x, y = _data()
    rows = ROWS // CHUNKS
    for mb in range(CHUNKS):
        piece = slice(mb * rows, (mb + 1) * rows)
        (nn.functional.cross_entropy(local(x[piece]), y[piece]) * (rows / ROWS)).backward()
    remote = _deploy(cluster, chain(), chunks=CHUNKS, schedule=schedule)
    try:
        hooks(remote, got)
        remote.train_step(x, y, nn.functional.cross_entropy)
        grads = [_grad(p) for p in remote.parameters()]
    finally:
        remote.close()
    return (got, grads), (want, [_grad(p) for p in local.parameters()])


def _step_log(model, log):
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda t, name=name: log.append((name, _grad(t))))
    model.get_parameter("2.weight").register_hook(
        lambda g: log.append(("tensor hook", g.numpy().copy())))


def _by_parameter(log):
    out = {}
    for name, value in log:
        out.setdefault(name, []).append(value)
    return out


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zb-h1", "zb-batched"])
def test_train_step_fires_once_per_micro_batch_under_every_schedule(cluster_2_or_3, schedule):
    """Under each schedule a post-accumulate hook fires once per micro-batch, with .grad
    as one process has it after that micro-batch (under zb-batched its stage's W's run one
    by one), after the weight's tensor hook."""
    (got, grads), (want, local_grads) = _train_step_both(cluster_2_or_3, _step_log, schedule)
    same_logs(grads, local_grads)
    got_by, want_by = _by_parameter(got), _by_parameter(want)
    assert got_by.keys() == want_by.keys()
    for name in want_by:
        assert len(got_by[name]) == CHUNKS, name
        same_logs(got_by[name], want_by[name], where=name)
    order = [name for name, _ in got if name in ("tensor hook", "2.weight")]
    assert order == ["tensor hook", "2.weight"] * CHUNKS


def test_stepping_inside_backward_with_micro_batches_is_refused(cluster_2_or_3):
    """With chunks > 1 the hook fires per micro-batch after later micro-batches' forwards
    ran: a hook that steps the weights there is refused (nothing written), not trained
    differently from one process."""
    remote = _deploy(cluster_2_or_3, chain(), chunks=CHUNKS)
    try:
        before = [p.detach().numpy().copy() for p in remote.parameters()]
        optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in remote.parameters()}
        for p in remote.parameters():
            p.register_post_accumulate_grad_hook(lambda t: optimizers[t].step())
        x, y = _data()
        with pytest.raises(RuntimeError, match=r"post-accumulate-grad hook '<lambda>' on "
                           r"'4\.(weight|bias)' changed the weights .* 4 micro-batches"):
            nn.functional.cross_entropy(remote(x), y).backward()
        same_logs([p.detach().numpy() for p in remote.parameters()], before)
    finally:
        remote.close()


def test_errors_as_in_one_process(cluster_2_or_3):
    remote = _deploy(cluster_2_or_3, chain())
    try:
        remote[0].bias.requires_grad_(False)
        with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that "
                                               "doesn't require gradient"):
            remote[0].bias.register_post_accumulate_grad_hook(lambda t: None)
        handle = remote[2].weight.register_post_accumulate_grad_hook(lambda t: 1)
        with pytest.raises(RuntimeError, match="post accumulate grad hooks should return "
                                               "None"):
            remote(_inputs()).sum().backward()
        handle.remove()

        def fails(t):
            raise ValueError("from the hook")

        handle = remote[4].weight.register_post_accumulate_grad_hook(fails)
        with pytest.raises(ValueError, match="from the hook"):
            remote(_inputs()).sum().backward()
        handle.remove()
        from disthook.distributed import hooks
        with pytest.raises(TypeError, match="register it on '2.bias' with register_hook"):
            remote[2].bias.register_post_accumulate_grad_hook(hooks.capture("grads"))
        remote(_inputs()).sum().backward()  # usable again
    finally:
        remote.close()


class Twice(nn.Module):
    """``block`` is called twice in one forward: its weight gets the sum, once."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.block, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.block(torch.tanh(self.block(x)))))


def test_parameter_of_two_calls_fires_once_with_the_sum(cluster_2_or_3):
    def program(model):
        log = []
        _logging_hooks(model, log, "hook")
        torch.manual_seed(1)
        model(torch.randn(3, 4)).square().sum().backward()
        return log

    want = program(Twice())
    remote = cluster_2_or_3.deploy(Twice(), placement={"block": 0, "head": 1})
    try:
        got = program(remote)
    finally:
        remote.close()
    assert [name for _, name, *_ in want].count("block.weight") == 1
    same_logs(got, want)


def nested():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 6), nn.Sequential(nn.Linear(6, 6), nn.Tanh(),
                                                        nn.Linear(6, 2)))


def test_a_pass_whose_hook_wrote_runs_no_further_ahead(cluster_2_or_3):
    """A post-accumulate hook that sets its .grad to None, then, later in the same backward
    of the stage, a tensor hook that only looked before and now doubles its gradient: had
    that firing run ahead of its answer, the pass would run again from it, with the
    gradients as they were when it started and the earlier answers replayed, and the
    .grad set to None would come back. After a hook wrote to the model the pass waits for
    every answer."""
    def program(model):
        def clear(t):
            t.grad = None

        model.get_parameter("1.2.weight").register_post_accumulate_grad_hook(clear)
        factor = [None]
        model.get_parameter("1.0.weight").register_hook(
            lambda g: None if factor[0] is None else g * factor[0])
        x = _inputs()
        out = []
        for f in (None, 2.0):
            factor[0] = f
            model(x).square().sum().backward()
            out.append([_grad(p) for p in model.parameters()])
        return out

    want = program(nested())
    remote = cluster_2_or_3.deploy(nested(), stages=2)
    try:
        got = program(remote)
    finally:
        remote.close()
    assert want[1][4] is None and got[1][4] is None  # 1.2.weight
    same_logs(got, want)


class UsedHereToo(nn.Module):
    """``b.weight`` is used by its placed part and by the forward here (a tied head)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x)
        return self.b(h) + nn.functional.linear(h, self.b.weight)


@pytest.mark.parametrize("register", ["register_hook", "register_post_accumulate_grad_hook"])
def test_a_share_computed_on_the_client_that_skips_the_hooks_is_said(cluster_2_or_3,
                                                                      register):
    """The share of a placed parameter's gradient that code on the client computed goes
    into its .grad on the worker without passing its hooks there (one process gives them
    the sum once): a RuntimeWarning says so, naming the parameter; .grad is right."""
    torch.manual_seed(1)
    x = torch.randn(2, 3)
    local = UsedHereToo()
    local(x).sum().backward()
    remote = cluster_2_or_3.deploy(UsedHereToo(), placement={"a": 0, "b": 1})
    try:
        getattr(remote.b.weight, register)(lambda t: None)
        with pytest.warns(RuntimeWarning, match=r"through 'b\.weight'.* without passing its "
                                                r"(tensor|post_accumulate) hook"):
            remote(x).sum().backward()
        same_logs(_grad(remote.b.weight), _grad(local.b.weight))
    finally:
        remote.close()


def test_one_optimizer_over_every_stage_stepped_in_a_train_step_hook_is_refused(
        cluster_2_or_3):
    """A hook inside a chain's train_step that steps the weights of several stages at once
    (one optimizer over the whole model): the write would wait behind the step that waits
    for the hook (it timed out after the request deadline); a clear error instead."""
    remote = _deploy(cluster_2_or_3, chain())
    try:
        optimizer = torch.optim.SGD(remote.parameters(), lr=0.1)
        optimizer.step()  # (its shares made on the workers)
        remote.get_parameter("4.bias").register_post_accumulate_grad_hook(
            lambda t: optimizer.step())
        x, y = _data()
        with pytest.raises(RuntimeError, match="from a hook inside a chain's train_step writes "
                                               "the weights of several stages at once"):
            remote.train_step(x, y, nn.functional.cross_entropy)
    finally:
        remote.close()
