"""A progress bar on stderr (no dependency): redrawn in place on a terminal, a few lines else."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int | None, label: str, enabled: bool = True, stream=None):
        self.total, self.label, self.done = total, label, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.start = time.perf_counter()
        self._tty = getattr(self.stream, "isatty", lambda: False)()

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.enabled and (self._tty or self.done == self.total):
            self._draw()

    def _draw(self) -> None:
        elapsed = time.perf_counter() - self.start
        if self.total:
            filled = int(30 * self.done / self.total)
            bar = "#" * filled + "." * (30 - filled)
            text = f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:.1f}s"
        else:
            text = f"{self.label} {self.done} {elapsed:.1f}s"
        end = "\r" if self._tty and self.done != self.total else "\n"
        self.stream.write(text + end)
        self.stream.flush()
