"""docs/architecture.md names only what exists: every file, folder, module attribute and class member it puts in
backticks, so the next engineer who follows it does not look for a module that was renamed or a registry that moved.

Names outside dlperf (torch's, Ray's, the standard library's) are listed in EXTERNAL; a bare word that names no
definition (a zoo option, a manifest field) is left alone unless it is written like a name of code.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "dlperf"
DOC = ROOT / "docs" / "architecture.md"
EXTERNAL = {"dlperf.X", "serve.status", "ray.init", "sys.path", "nn.Module", "importlib.util.find_spec",
            "time.perf_counter_ns", "manifest.json", "torch.profiler", "torch.distributed", "X",
            "parser.add_argument"}
"""Dotted names in the doc that are not dlperf's (`serve.status()` is Ray Serve's; `dlperf.X` stands for any)."""


def _rows() -> list[tuple[str, list[str]]]:
    """(the row's folder under src/dlperf, or "", its backticked names) per line of the doc, code blocks left out."""
    text = re.sub(r"```.*?```", "", DOC.read_text(), flags=re.S)
    rows = []
    for line in text.splitlines():
        cells = line.split(" | ")
        folder = ""
        if line.startswith("| ") and len(cells) > 1 and (m := re.match(r"`([\w/]+/)`", cells[1].strip())):
            folder = m.group(1)
        rows.append((folder, re.findall(r"`([^`]+)`", line)))
    return rows


@cache
def _defined(path: Path) -> frozenset[str]:
    """Names a module file defines (functions, classes, assignments, class members), and the attributes and
    whole-word strings it uses: `perf_counter_ns` (time's), `VmHWM` (a /proc field), `dlperf_meta` (a table)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(re.findall(r"\w+", node.value))
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return frozenset(names)


def _file(name: str, folder: str) -> Path | None:
    """A path the doc gives, relative to its row's folder (or a folder in it), src/dlperf or the repository."""
    base = SRC / folder
    for candidate in (base / name, SRC / name, SRC.parent / name, ROOT / name,
                      *(p / name for p in base.glob("*/") if folder)):
        if candidate.exists():
            return candidate
    return None


def _class_member(cls: str, member: str) -> bool:
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                fields = {n.target.id for n in node.body
                          if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
                return member in methods | fields
    return False


def _module_attr(dotted: str, folder: str) -> bool:
    """`measure.ab.decide`, `service.ClientWatch` (a module of the row's folder), `dlperf.load`."""
    parts = dotted.split(".")
    prefixes = ["dlperf."] + ([f"dlperf.{folder.strip('/').replace('/', '.')}."] if folder else [])
    for i in range(len(parts) - 1, 0, -1):
        for prefix in prefixes:
            module_name = (prefix + ".".join(parts[:i])).replace("dlperf.dlperf", "dlperf")
            try:
                obj: object = importlib.import_module(module_name)
            except ImportError:
                continue
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def _problems() -> list[str]:
    problems = []
    for folder, names in _rows():
        if folder and not (SRC / folder).is_dir():
            problems.append(f"folder src/dlperf/{folder} does not exist")
        for raw in names:
            token = raw.strip()
            if m := re.fullmatch(r"([\w/.]+\.py)(?::(\w+))?", token):
                path = _file(m.group(1), folder)
                if path is None:
                    problems.append(f"{token}: no such file (row {folder or '-'})")
                elif m.group(2) and m.group(2) not in _defined(path):
                    problems.append(f"{token}: {path.relative_to(ROOT)} defines no {m.group(2)}")
            elif re.fullmatch(r"\w+/", token):
                if _file(token, folder) is None:
                    problems.append(f"{token}: no such folder")
            elif m := re.fullmatch(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?", token):
                dotted = m.group(1)
                if dotted in EXTERNAL:
                    continue
                first, *rest = dotted.split(".")
                ok = (_class_member(first, rest[0]) if first[0].isupper() and len(rest) == 1
                      else _module_attr(dotted, folder))
                if not ok:
                    problems.append(f"{token}: no such module attribute or class member (row {folder or '-'})")
            elif m := re.fullmatch(r"([A-Za-z_]\w*)(?:\(.*\))?", token):
                name = m.group(1)
                # written like code: CONSTANT, CamelCase, snake_case or a call
                if not (name.isupper() or name[0].isupper() or "_" in name.strip("_") or "(" in token):
                    continue
                # anywhere: a row names other layers' names too (`Terminated`, cli's, in loadgen's row)
                # and the tests' helpers it shows (`CEILINGS` of tests/unit/profile/builders.py)
                files = [*SRC.rglob("*.py"), *(f for f in (ROOT / "tests").rglob("*.py") if f != Path(__file__))]
                if not any(name in _defined(f) or f.stem == name for f in files):
                    problems.append(f"{token}: nothing in src/dlperf or tests defines or uses {name}")
    return problems


def test_every_name_the_architecture_doc_gives_exists() -> None:
    assert _problems() == []


@pytest.mark.parametrize("token", ["passes/nonexistent.py", "zoo/__init__.py:NOT_ZOO", "measure.ab.no_such",
                                   "Store.no_such_method", "NO_SUCH_REGISTRY"])
def test_a_stale_name_is_reported(token: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    doc = tmp_path / "architecture.md"
    doc.write_text(f"| workload | `workload/` | `{token}` | |\n")
    monkeypatch.setattr(sys.modules[__name__], "DOC", doc)
    assert len(_problems()) == 1, token
