"""``torch._inductor.config``: the code generator's settings, every one torch 2.13 has, at
its defaults; they change nothing here (disthook compiles nothing), and a name torch lacks is
its AttributeError."""
from disthook._dynamo.config import load_settings

load_settings(__name__)
