"""System shared memory (Triton's `system_shared_memory` extension): a client on the same host puts input
tensors into a POSIX shared-memory object, registers it with the server under a region name, and sends
only the tensors' descriptions; the server reads the inputs from, and may write the outputs to, that
memory, so no tensor data crosses HTTP.

Off unless the server starts with `--allow-client-shm` (as Triton's `--allow-client-shm=true`): a
registered key lets a client make the server map that shared-memory object. Keys are names of objects
under /dev/shm (what `shm_open` takes, e.g. "/input_data" as tritonclient creates them), nothing else.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import stat
import threading
from dataclasses import dataclass
from typing import Any

from dlperf.serve.protocol import ProtocolError

SHM_DIR = "/dev/shm"
_KEY = re.compile(r"/?[A-Za-z0-9_.\-]+")


@dataclass
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    fd: int
    """Kept open to check the object's size before each use (see `SharedMemoryRegistry.view`)."""

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


class SharedMemoryRegistry:
    """The registered regions of one server; thread-safe (the event loop registers, requests read)."""

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def register(self, name: str, body: Any) -> None:
        """Map `body`'s {"key", "offset", "byte_size"} as region `name`. ProtocolError (400) on a bad body,
        a key that is not a shared-memory object, a region beyond the object's end, or a name in use."""
        if not name:  # status and unregister read an empty name as "every region": it could not be named alone
            raise ProtocolError("a shared memory region needs a name (the empty name stands for every region in "
                                "status and unregister)")
        if not isinstance(body, dict):
            raise ProtocolError("a register request's body is a JSON object {\"key\", \"offset\", \"byte_size\"}")
        key, offset, byte_size = body.get("key"), body.get("offset", 0), body.get("byte_size")
        if not isinstance(key, str) or not _KEY.fullmatch(key) or key.lstrip("/") in (".", ".."):
            raise ProtocolError(f"shared memory key {key!r} is not the name of a shared-memory object (e.g. "
                                "\"/input_data\", as shm_open takes it)")
        for field, value in (("offset", offset), ("byte_size", byte_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ProtocolError(f"shared memory region '{name}': {field} must be a non-negative integer, "
                                    f"got {value!r}")
        assert isinstance(offset, int) and isinstance(byte_size, int)
        if byte_size == 0:
            raise ProtocolError(f"shared memory region '{name}': byte_size must be positive")
        with self._lock:
            if name in self._regions:
                raise ProtocolError(f"shared memory region '{name}' is already registered: unregister it first")
            path = os.path.join(SHM_DIR, key.lstrip("/"))
            try:  # as shm_open does: no symlinks (a link in /dev/shm must not aim the server at another file)
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                raise ProtocolError(f"Unable to open shared memory region '{name}': key '{key}' ({exc.strerror}); "
                                    "create it (shm_open) before registering it") from None
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise ProtocolError(f"shared memory key '{key}' is not a shared-memory object")
                size = info.st_size
                if offset + byte_size > size:
                    raise ProtocolError(f"shared memory region '{name}': offset {offset} + byte_size {byte_size} "
                                        f"is beyond the {size} bytes of '{key}'")
                mapping = mmap.mmap(fd, size)
            except BaseException:
                os.close(fd)
                raise
            self._regions[name] = Region(name, key, offset, byte_size, mapping, fd)

    def unregister(self, name: str | None = None) -> None:
        """Forget region `name` (every region when None); an unknown name is not an error, as in Triton."""
        with self._lock:
            names = list(self._regions) if name is None else [name]
            for n in names:
                region = self._regions.pop(n, None)
                if region is not None:
                    _close(region.mapping)
                    os.close(region.fd)

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            if name is None:
                return [r.status() for r in self._regions.values()]
            if name not in self._regions:
                raise ProtocolError(f"Unable to find system shared memory region: '{name}'")
            return [self._regions[name].status()]

    def view(self, name: str, offset: int, byte_size: int, where: str) -> memoryview:
        """`byte_size` bytes at `offset` in region `name` (writable, no copy). ProtocolError when the region
        is not registered or the span leaves it."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise ProtocolError(f"{where}: shared memory region '{name}' is not registered "
                                    "(register it first: POST /v2/systemsharedmemory/region/NAME/register, or "
                                    "gRPC's SystemSharedMemoryRegister)")
            if offset + byte_size > region.byte_size:
                raise ProtocolError(f"{where}: offset {offset} + byte_size {byte_size} is beyond the "
                                    f"{region.byte_size} bytes of shared memory region '{name}'")
            # a client that shrank the object after registering it would make reading its pages a SIGBUS
            if os.fstat(region.fd).st_size < region.offset + region.byte_size:
                raise ProtocolError(f"{where}: shared memory region '{name}' ('{region.key}') is now smaller than "
                                    "when it was registered: register it again")
            start = region.offset + offset
            return memoryview(region.mapping)[start:start + byte_size]

    def close(self) -> None:
        self.unregister(None)


def _close(mapping: mmap.mmap) -> None:
    with contextlib.suppress(BufferError):  # a request still holds a view: the mapping goes when that view does
        mapping.close()
