"""A stand-in for an engine's thread pool that spins after a call (ONNX Runtime's intra-op workers, torch's OpenMP
workers): a thread that keeps a core busy for a while after each call, then sleeps until the next."""

from __future__ import annotations

import threading
import time


class Spinner:
    """`arm()` (the engine's call) sets the thread spinning for `spin_s` of wall time from now; `busy` says whether it
    is spinning. Close it with `close()`."""

    def __init__(self, spin_s: float) -> None:
        self.spin_s = spin_s
        self.busy = False
        self._until = 0.0
        self._lock = threading.Lock()
        self._armed = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="test-spinner", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        with self._lock:
            self._until = time.perf_counter() + self.spin_s
            self.busy = True
        self._armed.set()

    def _run(self) -> None:
        while True:
            self._armed.wait()
            self._armed.clear()
            if self._stop:
                return
            while True:
                if time.perf_counter() < self._until:
                    continue  # busy-waiting, as a pool's worker does for its next task
                with self._lock:
                    if time.perf_counter() >= self._until:
                        self.busy = False
                        break

    def close(self) -> None:
        self._stop = True
        self._armed.set()
        self._thread.join()
