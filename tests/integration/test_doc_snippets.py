"""The Python snippets of docs/*.md run as written (the convention is in docs/architecture.md, "Doc snippets")."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import dlperf

DOCS = Path(__file__).resolve().parents[2] / "docs"
# a ```python fence, indented or not, with the <!-- snippet: ... --> comment on the line above it, if any
FENCE = re.compile(r"(?:^[ \t]*<!-- snippet: (?P<mode>[a-z]+)(?: \((?P<why>[^)]*)\))? -->\n)?"
                   r"^(?P<indent>[ \t]*)```python\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MODES = ("run", "workload", "skip")


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    mode: str
    code: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def snippets() -> list[Snippet]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start("indent")) + 1
            found.append(Snippet(page.name, line, match["mode"] or "run", textwrap.dedent(match["code"])))
    return found


SNIPPETS = snippets()


def test_every_python_fence_is_found_and_marked_with_a_known_mode() -> None:
    fences = sum(len(re.findall(r"^[ \t]*```python$", p.read_text(encoding="utf-8"), re.M)) for p in DOCS.glob("*.md"))
    assert len(SNIPPETS) == fences
    assert {s.mode for s in SNIPPETS} <= set(MODES), [str(s) for s in SNIPPETS if s.mode not in MODES]


@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_doc_snippet_names_only_what_it_defines_or_imports(snippet: Snippet) -> None:
    """Skipped snippets too; a name used only inside a function (`MyNet()` in a factory) is caught here, where
    running the snippet would only define the function."""
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821", "--output-format",
                           "concise", "--stdin-filename", f"{snippet}.py", "-"],
                          input=snippet.code, capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if s.mode != "skip"], ids=str)
def test_doc_snippet_runs(snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a snippet that writes a file writes it here
    if snippet.mode == "run":
        exec(compile(snippet.code, str(snippet), "exec"), {"__name__": "__doc_snippet__"})
        return
    # a workload file: loaded as `dlperf bench file.py` loads it, its model called on its inputs, its metric scored
    path = tmp_path / f"snippet_{snippet.page.removesuffix('.md')}_{snippet.line}.py"
    path.write_text(snippet.code, encoding="utf-8")
    workload = dlperf.load_workload(str(path))
    model = workload.build_model()
    with torch.inference_mode():
        out = model(*workload.example_inputs(2))
    assert out.shape[0] == 2
    if workload.eval is not None:
        assert 0.0 <= workload.score(model, "cpu") <= 1.0
        if workload.eval.calibration_inputs is not None:
            with torch.inference_mode():
                assert all(model(*batch).shape[1:] == out.shape[1:] for batch in workload.eval.calibration_inputs())
