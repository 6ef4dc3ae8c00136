"""torch's public surface, measured and made importable (see ``refusal`` and ``coverage``).

Imported first by ``disthook/__init__.py``: from then on every disthook module that mirrors a
torch module answers torch's names it lacks with refusals.
"""
from disthook._surface.refusal import activate

activate()
