"""``disthook bench``: disthook against torch (when installed), raw pyzmq, one process and
torch's distributed tools, each side measured in the same run.

Every figure is a ratio disthook / baseline, the sides timed in turn round by round (the
median of the rounds' ratios, see ``timing``), single-threaded (one BLAS thread,
``torch.set_num_threads(1)``), because absolute times on shared machines mean little.

One module per suite (``engine`` holds the engine and nn suites), ``timing`` the helpers they
share, ``table`` the common table, ``stages`` the MLP cut into stages that peers and
scaleout build and torch's pipelining of it in spawned processes, ``plot`` the ``--plot``
figures and ``runner`` the command. The suites import ``timing``, ``table`` and ``stages``,
which import no suite; the runner imports each suite only when it runs.
"""

SUITES = ("dist", "engine", "nn", "peers", "pipeline", "scaleout", "scaling", "tenancy",
          "toolkit", "workspan")
