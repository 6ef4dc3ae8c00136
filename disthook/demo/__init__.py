"""``disthook demo``: a small CNN learns scikit-learn's digits on worker processes while hooks
that run on the workers watch and steer it; the pictures land in a directory with an
``index.html``.

``run(...)`` (``disthook.demo.train``) does the work, ``plots`` draws, ``report`` writes the
page. The demo needs the ``demo`` extra: ``missing()`` names what is not installed.
"""
from __future__ import annotations

import importlib.util

__all__ = ["INSTALL", "missing", "run"]

REQUIREMENTS = {"sklearn": "scikit-learn", "matplotlib": "matplotlib", "tqdm": "tqdm"}
INSTALL = "pip install -e '.[demo]'"


def missing() -> list[str]:
    """The distributions of the ``demo`` extra that are not installed."""
    return [dist for module, dist in REQUIREMENTS.items()
            if importlib.util.find_spec(module) is None]


def run(**options):
    """Train, watch and draw (see ``disthook.demo.train.run`` for the options)."""
    from disthook.demo.train import run as run_demo

    return run_demo(**options)
