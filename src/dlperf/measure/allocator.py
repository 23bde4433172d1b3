"""The process's heap allocator: which one is running, where jemalloc or tcmalloc can be found, giving freed
memory back to the OS with whichever runs, and restarting a command under another one (`LD_PRELOAD`).

The allocator is not a detail for a PyTorch process on the CPU: activations of every batch size are freed
and allocated again at every request, and glibc's per-thread arenas keep what the largest batches left,
creeping under a long load and depending on the process's history (docs/serve.md, Memory). jemalloc and
tcmalloc keep RSS flat under the same load; which one is fastest is measured there, not assumed."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from dlperf.errors import ConfigError

ALLOCATORS = ("glibc", "jemalloc", "tcmalloc")
"""What `--allocator` accepts besides 'auto'."""

CHOICES = ("auto", *ALLOCATORS)
"""What `--allocator` accepts."""

REEXEC_MARK = "DLPERF_ALLOCATOR_REEXEC"
"""Set in the environment of a command restarted under an allocator, so it is restarted once at most."""

_LIBRARY_NAMES = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
}
_INSTALL_HINT = {
    "jemalloc": "apt-get install libjemalloc2 (Debian/Ubuntu), dnf install jemalloc, or conda install jemalloc",
    "tcmalloc": "apt-get install libtcmalloc-minimal4 (Debian/Ubuntu), dnf install gperftools-libs, or conda "
                "install gperftools",
}
_SEARCH_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                "/usr/local/lib", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib64", "/lib")


def active_allocator(maps: str | None = None) -> str:
    """'jemalloc' or 'tcmalloc' when that library is mapped into this process (preloaded or linked), else
    'glibc' on Linux with glibc, else 'system'. `maps` is /proc/self/maps' text (read when None)."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            maps = ""
    for line in maps.splitlines():
        name = line.rsplit("/", 1)[-1]
        if name.startswith("libjemalloc"):
            return "jemalloc"
        if name.startswith("libtcmalloc"):
            return "tcmalloc"
    return "glibc" if _glibc() else "system"


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError, AttributeError):
        return False


def find_library(name: str) -> Path | None:
    """The shared library of allocator `name` ('jemalloc' or 'tcmalloc') on this machine, or None: the
    system's library directories and the linker's cache, then, for jemalloc, the copy Ray ships with."""
    if name not in _LIBRARY_NAMES:
        raise ConfigError(f"unknown allocator {name!r}: choose one of {', '.join(_LIBRARY_NAMES)}")
    for directory in _SEARCH_DIRS:
        for file in _LIBRARY_NAMES[name]:
            path = Path(directory) / file
            if path.is_file():
                return path
    found = ctypes.util.find_library("tcmalloc_minimal" if name == "tcmalloc" else name)
    if found:
        for directory in _SEARCH_DIRS:
            if (Path(directory) / found).is_file():
                return Path(directory) / found
    if name == "jemalloc":
        spec = importlib.util.find_spec("ray")
        if spec is not None and spec.origin:
            bundled = Path(spec.origin).parent / "core" / "libjemalloc.so"
            if bundled.is_file():
                return bundled
    return None


GLIBC_ONLY_ENGINES = {
    "openvino": "OpenVINO aborts under a preloaded jemalloc or tcmalloc (free(): invalid pointer, double free or "
                "corruption; OpenVINO 2026.4 here, already at ov.Core())",
}
"""Artifact engines that only run under glibc's malloc, and why."""


def resolve(choice: str, engines: Iterable[str] = ()) -> str:
    """The allocator `--allocator CHOICE` asks for, to run artifacts of `engines`. 'auto' is glibc for an engine
    that only runs under it, keeps jemalloc or tcmalloc where this process already runs it (preloaded by the
    user), else is tcmalloc where it is installed (on Linux), else what runs. Another choice for such an engine
    is a ConfigError saying why."""
    glibc_only = sorted(e for e in engines if e in GLIBC_ONLY_ENGINES)
    if glibc_only:
        if choice in ("auto", "glibc"):
            return "glibc"
        raise ConfigError(f"--allocator {choice} does not go with {glibc_only[0]} artifacts: "
                          f"{GLIBC_ONLY_ENGINES[glibc_only[0]]}; use --allocator glibc (what auto picks for them)")
    if choice == "auto":
        current = active_allocator()
        if current in ("jemalloc", "tcmalloc") or not sys.platform.startswith("linux"):
            return current  # LD_PRELOAD is the Linux loader's
        return "tcmalloc" if find_library("tcmalloc") is not None else current
    if choice not in ALLOCATORS:
        raise ConfigError(f"--allocator {choice!r}: choose auto, {', '.join(ALLOCATORS)}")
    return choice


def preload_environment(name: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of `env` (default os.environ) whose LD_PRELOAD starts with allocator `name`'s library; refused
    with how to install it when it is not on this machine."""
    env = dict(os.environ if env is None else env)
    if name == "glibc":
        kept = [p for p in env.get("LD_PRELOAD", "").split() if not _is_allocator(p)]
        if kept:
            env["LD_PRELOAD"] = " ".join(kept)
        else:
            env.pop("LD_PRELOAD", None)
        return env
    path = find_library(name)
    if path is None:
        raise ConfigError(f"--allocator {name}: no {name} library found on this machine (looked for "
                          f"{', '.join(_LIBRARY_NAMES[name])} in {', '.join(_SEARCH_DIRS[:3])}, ...); install it "
                          f"({_INSTALL_HINT[name]}) or choose --allocator glibc")
    others = [p for p in env.get("LD_PRELOAD", "").split() if not _is_allocator(p)]
    env["LD_PRELOAD"] = " ".join([str(path), *others])
    return env


def _is_allocator(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base.startswith(("libjemalloc", "libtcmalloc"))


def run_under(name: str) -> None:
    """Make this process run under allocator `name`: return if it already does, else restart the same
    command line with the library preloaded (`os.execve`, before the caller has loaded a model). A command
    already restarted once is not restarted again: if the allocator is still not the one asked for (a
    static binary, a loader that ignores LD_PRELOAD), it is refused."""
    if active_allocator() == name:
        return
    if os.environ.get(REEXEC_MARK) == name:
        raise ConfigError(f"--allocator {name}: restarted with {name} preloaded (LD_PRELOAD="
                          f"{os.environ.get('LD_PRELOAD', '')}) but this process still uses {active_allocator()}")
    if name == "glibc" and active_allocator() == "system":
        raise ConfigError("--allocator glibc: this platform's C library is not glibc")
    env = preload_environment(name)
    env[REEXEC_MARK] = name
    argv = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    from dlperf._stdio import restore_for_exec

    restore_for_exec()  # a --json command's stdout, moved to stderr (`cli.main`), is the restarted one's again
    os.execve(sys.executable, argv, env)


def releaser() -> Callable[[], bool] | None:
    """The call that gives the heap's free pages back to the OS with the allocator this process runs, looked
    up once: glibc's `malloc_trim(0)`, jemalloc's purge of all arenas, tcmalloc's `ReleaseFreeMemory`; None
    where there is no such call."""
    allocator = active_allocator()
    try:
        process = ctypes.CDLL(None)
        if allocator == "jemalloc":
            mallctl = process.mallctl
            mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            # MALLCTL_ARENAS_ALL is 4096: every arena's dirty and muzzy pages
            return lambda: int(mallctl(b"arena.4096.purge", None, None, None, 0)) == 0
        if allocator == "tcmalloc":
            release = process.MallocExtension_ReleaseFreeMemory
            release.restype = None
            return lambda: release() is None
        if allocator == "glibc":
            name = ctypes.util.find_library("c")
            trim = ctypes.CDLL(name).malloc_trim if name else process.malloc_trim
            trim.argtypes = [ctypes.c_size_t]
            return lambda: trim(0) is not None
    except (OSError, AttributeError):
        return None
    return None


def release_free_memory() -> bool:
    """Give the heap's free pages back to the OS once (`releaser`); False where there is no such call."""
    release = releaser()
    return release is not None and release()
