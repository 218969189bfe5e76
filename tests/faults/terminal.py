"""The real `triage` app in a pseudo-terminal: keys in, screen bytes out, as a user's terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import threading
import time

from tests.faults.processes import Run
from tests.probes.helpers import MARKER_ENV, REPO, triage_env


class Terminal:
    """`python -m triage tui ARGS` on a 120x40 pty; the screen's bytes accumulate in `screen`."""

    def __init__(self, marker: str, *args: str, **env: str) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        environment = triage_env(**{MARKER_ENV: marker, "TERM": "xterm-256color"}, **env)
        environment.pop("NO_COLOR", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "triage", "tui", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environment,
            cwd=REPO,
            start_new_session=True,  # the pty becomes its controlling terminal, as in a real one
        )
        os.close(slave)
        self.run = Run(proc, marker)
        self.screen = bytearray()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.master], [], [], 0.1)
                if ready:
                    data = os.read(self.master, 1 << 16)
                    if not data:
                        return
                    self.screen.extend(data)
            except OSError:  # the app closed the terminal
                return

    def wait_for(self, text: str, within_s: float = 30.0) -> bool:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if text.encode() in self.screen:
                return True
            time.sleep(0.05)
        return False

    def press(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        self.run.cleanup()
        os.close(self.master)
