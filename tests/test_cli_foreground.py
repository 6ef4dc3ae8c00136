"""The CLI's foreground loop (``launch``, ``serve``) as a program calling ``main()`` meets it:
Ctrl-C stops the cluster, a second Ctrl-C cannot cut the reaping, and afterwards the
program's own Ctrl-C handler is back."""
import signal

from disthook import cli


def test_the_callers_sigint_handler_is_back_after_the_foreground_loop():
    def mine(*_):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, mine)
    seen = []
    try:
        def start():
            raise KeyboardInterrupt  # Ctrl-C while the cluster runs

        def stop():  # during the reaping, Ctrl-C is ignored
            seen.append(signal.getsignal(signal.SIGINT))

        assert cli._foreground(start, lambda: None, stop) == 0
        assert seen == [signal.SIG_IGN]
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)
