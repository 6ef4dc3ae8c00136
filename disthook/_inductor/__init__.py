"""``torch._inductor``: only its ``config``, which compiled programs set (see
``disthook._dynamo.config``)."""
from disthook._inductor import config

__all__ = ["config"]
