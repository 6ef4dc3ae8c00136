"""What the demo says while it runs: a line for each phase, a progress bar over the training
steps on a terminal, and one summary line per epoch that stays on screen.

On a terminal the bar redraws itself in place and the lines are written above it; anywhere
else (a pipe, a file, a CI log) there is no bar and no carriage return, only whole lines.
"""
from __future__ import annotations

import sys
import time


class Progress:
    """The demo's messages on ``stream`` (stderr by default; the results go to stdout)."""

    def __init__(self, *, stream=None, enabled: bool = True):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.interactive = enabled and _is_terminal(self.stream)
        self._bar = None
        self._epoch_started = time.perf_counter()

    def say(self, text: str) -> None:
        """One line that stays (above the bar while there is one)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def start_training(self, epochs: int, steps_per_epoch: int, batch_size: int) -> None:
        """Announce the training, and on a terminal open the bar over all its steps."""
        self.say(f"training: {epochs} epoch(s) of {steps_per_epoch} steps, batch {batch_size}")
        if self.interactive:
            from tqdm import tqdm

            self._bar = tqdm(total=epochs * steps_per_epoch, unit="step", file=self.stream,
                             dynamic_ncols=True, leave=False)
        self._epoch_started = time.perf_counter()

    def step(self, epoch: int, epochs: int, loss: float, accuracy: float) -> None:
        """One training step done (the bar only: a pipe gets the epoch lines)."""
        if self._bar is not None:
            self._bar.set_description(f"epoch {epoch}/{epochs}", refresh=False)
            self._bar.set_postfix(loss=f"{loss:.3f}", acc=f"{accuracy:.0%}", refresh=False)
            self._bar.update()

    def end_epoch(self, epoch: int, epochs: int, *, loss: float, accuracy: float,
                  test_accuracy: float) -> None:
        """The epoch's summary line: mean training loss and accuracy, test accuracy."""
        seconds = time.perf_counter() - self._epoch_started
        self.say(f"epoch {epoch:>{len(str(epochs))}}/{epochs}: train loss {loss:.3f}, "
                 f"train accuracy {accuracy:.1%}, test accuracy {test_accuracy:.1%} "
                 f"({seconds:.1f} s)")
        self._epoch_started = time.perf_counter()

    def close(self) -> None:
        """Remove the bar (the epoch lines above it stay)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
