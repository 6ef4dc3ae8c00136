"""The local launcher: a cluster's processes as children of this one (what ``local_cluster``
and ``disthook launch`` use). Each child stops by itself when this process is gone
(``--parent-pid``), and runs in its own session, so Ctrl-C reaches only this process."""
from __future__ import annotations

import os
import subprocess
import sys

from deploy.roles import Role

__all__ = ["spawn"]


def spawn(role: Role, stderr=None, *, announce: bool = False) -> subprocess.Popen:
    """Start ``role`` here. With ``announce`` its stdout is a pipe (the coordinator prints
    the endpoint it bound on its first line); otherwise stdout is discarded."""
    cmd = [*role.argv(sys.executable), "--parent-pid", str(os.getpid())]
    # a worker imports what this process imports (its sys.path, as multiprocessing's spawn
    # passes it), so a model class in a module beside the client's script is found
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    paths += os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(
        p for p in paths if p and os.path.isdir(p))))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE if announce else subprocess.DEVNULL,
                            stderr=stderr, stdin=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
