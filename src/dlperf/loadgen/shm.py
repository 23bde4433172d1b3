"""`dlperf load --shared-memory system` (perf_analyzer's option): the requests' input tensors are placed
once in a POSIX shared-memory object registered with the server (Triton's system_shared_memory extension),
and each request carries only their descriptions; the outputs go to one registered region per output,
which every request overwrites (their contents are not read, as in perf_analyzer), unless the replies are
checked against validation data, when they come back in the reply.

The objects are created by this process and unregistered and unlinked by `close()`; the server must run on
this host with shared memory allowed (`dlperf serve --allow-client-shm`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Sequence
from typing import Any

from dlperf.errors import LoadGenError
from dlperf.loadgen.client import Endpoint, fetch
from dlperf.serve.protocol import Tensor, tensor_bytes

DEFAULT_OUTPUT_SIZE = 102400
"""Bytes of each output region (perf_analyzer's --output-shared-memory-size default)."""


class ClientShm:
    """The inputs of every distinct request in one shared-memory object, and one region per output."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str], output_size: int = DEFAULT_OUTPUT_SIZE,
                 protocol: str = "http") -> None:
        if output_size < 1:
            raise LoadGenError(f"--output-shared-memory-size must be positive, got {output_size}")
        self.protocol = protocol
        """How the regions are registered: http (`/v2/systemsharedmemory`) or grpc (SystemSharedMemory*)."""
        self.endpoint = endpoint
        self.headers = headers
        self.output_size = output_size
        self.prefix = f"dlperf_load_{os.getpid()}_{id(self) & 0xFFFFFF:x}"
        self._chunks: list[bytes] = []
        self._size = 0
        self._outputs: list[str] = []
        self._made: list[Any] = []  # multiprocessing SharedMemory objects
        self._registered: list[str] = []

    @property
    def input_region(self) -> str:
        return f"{self.prefix}_in"

    def describe_inputs(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """`tensors` as shared-memory descriptions (their data goes into the input object at the next free
        offset, 64-byte aligned)."""
        out = []
        for tensor in tensors:
            data = tensor_bytes(tensor.data, tensor.datatype)
            pad = -self._size % 64
            if pad:
                self._chunks.append(b"\0" * pad)
                self._size += pad
            params = {"shared_memory_region": self.input_region, "shared_memory_byte_size": len(data),
                      "shared_memory_offset": self._size}
            self._chunks.append(data)
            self._size += len(data)
            out.append(Tensor(tensor.name, tensor.datatype, tensor.data, params))
        return out

    def output_parameters(self, name: str) -> dict[str, Any]:
        """The requested-output parameters that send output `name` to its region."""
        if name not in self._outputs:
            self._outputs.append(name)
        index = self._outputs.index(name)
        return {"shared_memory_region": f"{self.prefix}_out{index}", "shared_memory_byte_size": self.output_size}

    def open(self) -> None:
        """Create the objects, write the inputs, register every region with the server."""
        from multiprocessing import shared_memory

        def make(region: str, size: int, data: bytes = b"") -> None:
            try:
                obj = shared_memory.SharedMemory(name=region, create=True, size=max(1, size))
            except OSError as exc:
                raise LoadGenError(f"cannot create shared memory '{region}' of {size} bytes: {exc}") from exc
            self._made.append(obj)
            if data:
                assert obj.buf is not None
                obj.buf[:len(data)] = data
            self._register(region, size)

        try:
            make(self.input_region, self._size, b"".join(self._chunks))
            for index in range(len(self._outputs)):
                make(f"{self.prefix}_out{index}", self.output_size)
        except BaseException:
            self.close()
            raise
        self._chunks = []

    def _register(self, region: str, size: int) -> None:
        refused = (f"the server at {self.endpoint.authority} refused to register shared memory (%s); it must run "
                   "on this host and allow it (dlperf serve --allow-client-shm)")
        if self.protocol == "grpc":
            from dlperf.loadgen.grpc_client import register_shm

            try:
                register_shm(self.endpoint, self.headers, region, f"/{region}", size)
            except LoadGenError as exc:
                raise LoadGenError(refused % exc) from exc
        else:
            body = json.dumps({"key": f"/{region}", "offset": 0, "byte_size": size}).encode()
            reply = asyncio.run(fetch(self.endpoint, f"/v2/systemsharedmemory/region/{region}/register",
                                      {**self.headers, "Content-Type": "application/json"}, "POST", body))
            if reply.status != 200:
                raise LoadGenError(refused % f"{reply.status}: {reply.body[:300].decode('utf-8', 'replace')}")
        self._registered.append(region)

    def close(self) -> None:
        """Unregister what was registered (a server that is gone is no error) and unlink the objects."""
        for region in self._registered:
            with contextlib.suppress(LoadGenError):
                if self.protocol == "grpc":
                    from dlperf.loadgen.grpc_client import unregister_shm

                    unregister_shm(self.endpoint, self.headers, region)
                else:
                    asyncio.run(fetch(self.endpoint, f"/v2/systemsharedmemory/region/{region}/unregister",
                                      self.headers, "POST", timeout_s=5.0))
        self._registered = []
        for obj in self._made:
            obj.close()
            with contextlib.suppress(FileNotFoundError):
                obj.unlink()
        self._made = []
