"""The compiler settings recent training scripts set (modded-nanogpt, torchtitan, gpt-fast:
``compiled_autograd``, ``coordinate_descent_check_all_directions``, ``triton.cudagraph_trees``,
``config.patch``): every name torch 2.13 has is settable at torch's default, a misspelt one
is torch's AttributeError, and ``torch._inductor`` is reached from ``import torch`` alone."""
import json
import os
from pathlib import Path

import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("T", [torch, disthook], ids=["torch", "disthook"])
def test_settings_real_scripts_set(T):
    dynamo, inductor = T._dynamo.config, T._inductor.config
    assert (dynamo.compiled_autograd, dynamo.cache_size_limit) == (False, 8)
    assert inductor.coordinate_descent_check_all_directions is False
    assert inductor.triton.cudagraph_trees is True
    with dynamo.patch(compiled_autograd=True), \
            inductor.patch({"triton.cudagraph_trees": False, "max_autotune": True}):
        assert dynamo.compiled_autograd and inductor.max_autotune
        assert inductor.triton.cudagraph_trees is False
    assert (dynamo.compiled_autograd, inductor.triton.cudagraph_trees) == (False, True)

    @dynamo.patch("suppress_errors", True)
    def inside():
        return dynamo.suppress_errors
    assert inside() is True and dynamo.suppress_errors is False
    inductor.triton.unique_kernel_names = True
    with pytest.raises(AttributeError, match="torch._inductor.config.triton.cudagrafs does "):
        inductor.triton.cudagrafs = True
    with pytest.raises(AttributeError, match="torch._dynamo.config.compiled_autogard does "), \
            dynamo.patch(compiled_autogard=True):
        pass


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_every_torch_setting_is_here_at_its_default():
    for module, ours in ((torch._dynamo.config, disthook._dynamo.config),
                         (torch._inductor.config, disthook._inductor.config)):
        for name in module._config:
            if name.startswith("_"):
                continue
            want, got = module._config[name].default, ours
            for part in name.split("."):
                got = getattr(got, part)
            # a default computed where torch runs (compile_threads: this machine's cores; a
            # path under the working directory or torch's install directory, which the file
            # keeps relative: checked below) and an alias of another setting are left out
            if name in _paths(module.__name__):
                continue
            if isinstance(want, (bool, int, float, str, type(None))) and not callable(want) \
                    and getattr(module, name) == want:
                assert got == want, name


def _paths(module_name: str) -> dict:
    data = json.loads((Path(disthook.__file__).parent / "_surface" / "torch_settings.json")
                      .read_text())[module_name]
    return {name: v for name, v in data.items()
            if isinstance(v, dict) and set(v) & {"cwd", "site"}}


def test_a_path_setting_is_where_this_program_runs_never_where_the_file_was_made():
    paths = _paths("torch._dynamo.config")
    assert set(paths) >= {"base_dir", "debug_dir_root"}
    # (computed, as torch's, from the working directory when the config was imported)
    root = disthook._dynamo.config.debug_dir_root
    assert os.path.isabs(root) and os.path.basename(root) == "torch_compile_debug"
    text = (Path(disthook.__file__).parent / "_surface" / "torch_settings.json").read_text()
    assert os.getcwd() not in text and str(Path(torch.__file__).parents[1]) not in text
