"""`serve()` freezes what startup made (torch, the model, the app) out of the garbage collector's reach before it
listens, so that a collection of the oldest generation under load walks only what serving made since, instead of
pausing every in-flight request for the whole heap (docs/serve.md, *Garbage collection*)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .helpers import free_port

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent("""
    import gc, os, signal, sys
    from dlperf.serve.server import serve
    from dlperf.serve.service import ServeConfig

    seen = {}

    def ready(state, url):
        seen["frozen"] = gc.get_freeze_count()
        # gc.get_objects() lists the collected generations only, not the permanent one
        tracked = {id(o) for o in gc.get_objects()}
        seen["state tracked"] = id(state) in tracked
        os.kill(os.getpid(), signal.SIGTERM)

    rc = serve(ServeConfig(model="zoo:mlp", port=int(sys.argv[1]), exit_timeout_s=5.0), on_ready=ready)
    print(rc, seen["frozen"], seen["state tracked"])
""")


def test_serve_freezes_the_startup_heap_before_it_listens() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(free_port())], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    rc, frozen, tracked = out.stdout.split()
    assert rc == "0"
    assert int(frozen) > 50_000  # torch alone makes more; 0 unfrozen
    assert tracked == "False"  # the server's own state is among the frozen objects
