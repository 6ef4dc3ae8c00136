"""Run one role of a cluster (``coordinator`` or ``workers``) from this installed project,
whatever the working directory holds: ``python .../deploy/role_main.py workers ARGS``.

``python -m workers`` imports the first ``workers`` on the path, and the working directory
(and the client's script directory, which a local worker gets on its PYTHONPATH) comes
first: a user's ``workers.py`` would run instead of the worker. Run by its path, this file
resolves the project's own top-level packages in the project's directory, and every other
module as ``python -m`` would (the working directory first), so a worker still finds the
user's modules beside their script. Launchers on this machine use it (``deploy.local``,
``disthook coordinator|worker``); the standard library only, and nothing imported before
the role runs (a worker sets its thread count before numpy loads).

``role_main.py --preload FD`` is the preloaded process local roles are forked from
(``deploy.warm``): it imports the roles' modules once, and each role it forks goes on here
as if started by its own command line.
"""
import faulthandler
import importlib.machinery
import os
import runpy
import signal
import sys

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT_PACKAGES = ("coordinator", "workers", "deploy", "disthook")
ROLES = ("coordinator", "workers")


class ProjectFinder:
    """Finds the project's top-level packages in the project's directory only."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is None and name in PROJECT_PACKAGES:
            return importlib.machinery.PathFinder.find_spec(name, [PROJECT_DIR])
        return None


def main() -> None:
    if sys.argv[1:2] == ["--preload"] and len(sys.argv) == 3:
        preload(int(sys.argv[2]))  # returns in a role forked from it, its argv set
    if len(sys.argv) < 2 or sys.argv[1] not in ROLES:
        sys.exit(f"usage: {sys.executable} {__file__} {{{'|'.join(ROLES)}}} [ARGS...]")
    role = sys.argv.pop(1)
    # `kill -USR1 <pid>` prints every thread's stack to stderr, from the first moment (a
    # start that stalls says where it is: deploy.local.stacks_of), never ending the process
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if ProjectFinder not in sys.meta_path:
        sys.meta_path.insert(0, ProjectFinder)
    sys.path[0] = os.getcwd()  # as under ``python -m``: not this file's directory
    runpy.run_module(role, run_name="__main__", alter_sys=True)


def preload(fd: int) -> None:
    """Be the preloaded process of ``deploy.warm`` on the socket ``fd``, finding the
    project's packages as a role does; returns only in a role forked from it."""
    sys.meta_path.insert(0, ProjectFinder)
    sys.path[0] = os.getcwd()
    from deploy import warm

    warm.serve(fd)


if __name__ == "__main__":
    main()
