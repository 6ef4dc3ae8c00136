"""The hook fuzzer's seventh round (F9) and what it found in one process, each as the small
program it came down to.

A forward that raises with two global ``always_call`` forward hooks, the first of which
removes itself (seed 34977, the fifth round's bad call): torch runs the always_call hooks
of the error path over its hook dicts themselves, so the removal makes the next step raise
"OrderedDict mutated during iteration" (the forward's error its context), and the second
hook does not run for that module. disthook went over a copy: the second hook ran, and the
forward's own error came out."""
import pytest


def _always_call_hooks_removed_in_the_error_path(T, n_global: int, local: bool,
                                                 removes: str) -> list:
    nn = T.nn
    log, handles = [], {}

    def hook(name):
        def fn(module, args, out):
            log.append(name)
            if name == removes:
                handles[name].remove()
        return fn

    lin = nn.Linear(3, 3)
    try:
        for i in range(n_global):
            handles[f"g{i}"] = nn.modules.module.register_module_forward_hook(
                hook(f"g{i}"), always_call=True)
        if local:
            for name in ("l0", "l1"):
                handles[name] = lin.register_forward_hook(hook(name), always_call=True)
        try:
            lin(T.ones(2, 4))  # the wrong width: forward raises
        except RuntimeError as e:
            log.append((str(e).split(" (")[0], type(e.__context__).__name__))
    finally:
        for handle in handles.values():
            handle.remove()
    return log


@pytest.mark.parametrize("n_global, local, removes", [
    (2, False, "g0"), (2, True, "g0"), (1, True, "g0"), (1, True, "l0"), (0, True, "l1"),
    (2, True, "g1")])
def test_an_always_call_hook_that_removes_one_in_the_error_path_as_torch(
        n_global, local, removes):
    torch = pytest.importorskip("torch")
    import disthook

    want = _always_call_hooks_removed_in_the_error_path(torch, n_global, local, removes)
    got = _always_call_hooks_removed_in_the_error_path(disthook, n_global, local, removes)
    assert got == want
