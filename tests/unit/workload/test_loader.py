"""load_workload: the three user-file forms, nn.Modules, the zoo, and the error messages users see."""

from __future__ import annotations

import re
import textwrap
from collections import namedtuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import WorkloadError
from dlperf.workload import Workload, describe_inputs, from_module, load_workload

pytestmark = pytest.mark.unit


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


WORKLOAD_VARIABLE = """
    import torch
    from torch import nn
    from dlperf import Workload

    workload = Workload(
        name="tiny",
        make_model=lambda: nn.Linear(4, 2),
        make_inputs=lambda b: (torch.ones(b, 4),),
        kind="mlp",
    )
"""


def test_file_with_workload_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "wl.py", WORKLOAD_VARIABLE)
    w = load_workload(str(path))
    assert w.name == "tiny"
    assert w.kind == "mlp"
    assert w.source == f"{path}:workload"
    (x,) = w.example_inputs(3)
    assert x.shape == (3, 4)
    assert w.check(w.build_model(), (x,)).shape == (3, 2)


def test_function_annotated_to_return_workload_gets_options(tmp_path: Path) -> None:
    path = write(tmp_path, "fn.py", """
        from __future__ import annotations
        import torch
        from torch import nn
        import dlperf

        def make(width: int = 4) -> dlperf.Workload:
            return dlperf.Workload(name=f"w{width}", make_model=lambda: nn.Linear(width, 1),
                                   make_inputs=lambda b: torch.zeros(b, width))

        def helper() -> int:
            return 1
    """)
    w = load_workload(str(path), width=6)
    assert w.name == "w6"
    # make_inputs returned a bare tensor: example_inputs wraps it in a tuple
    inputs = w.example_inputs(2)
    assert isinstance(inputs, tuple) and inputs[0].shape == (2, 6)


FUNCTION_WITH_OPTIONS = """
    import torch
    from torch import nn
    import dlperf

    def make(width: int = 4, scale: float = 1.0, act: str = "relu") -> dlperf.Workload:
        return dlperf.Workload(name=f"w{width}-{scale}-{act}", make_model=lambda: nn.Linear(width, 1),
                               make_inputs=lambda b: torch.zeros(b, width))
"""


def test_a_functions_options_are_kept_in_its_source(tmp_path: Path) -> None:
    """A candidate process rebuilds the workload from its source: it must get the same options, not the defaults."""
    path = write(tmp_path, "fn.py", FUNCTION_WITH_OPTIONS)
    w = load_workload(f"{path}:make", width=6, scale=0.5, act="gelu")
    assert w.name == "w6-0.5-gelu"
    assert w.source == f"{path}:make?width=6&scale=0.5&act=gelu"
    assert load_workload(w.source).name == "w6-0.5-gelu"
    assert load_workload(str(path), width=8).source == f"{path}:make?width=8"
    assert load_workload(f"{path}?width=3").name == "w3-1.0-relu"
    # one source whichever way the options were written: in the function's order, defaults left out
    assert load_workload(f"{path}:make?act=gelu&width=4&scale=0.5").source == f"{path}:make?scale=0.5&act=gelu"
    # a value a spec string cannot carry leaves no source: optimize refuses it rather than rebuild the defaults
    assert load_workload(str(path), act="a&b").source == ""
    assert load_workload(str(path), scale="7").source == ""  # it would come back as the int 7
    # `act` takes a string: '?act=7' gives it the text "7" back
    assert load_workload(str(path), act="7").source == f"{path}:make?act=7"


def test_true_and_false_options_are_booleans(tmp_path: Path) -> None:
    """'?pretrained=false' passed the string "false", which is true."""
    path = write(tmp_path, "flag.py", """
        import torch
        import dlperf

        def make(pretrained: bool = True) -> dlperf.Workload:
            return dlperf.Workload(name=f"p{pretrained!r}", make_model=lambda: torch.nn.Linear(4, 1),
                                   make_inputs=lambda b: (torch.zeros(b, 4),))
    """)
    w = load_workload(f"{path}?pretrained=false")
    assert w.name == "pFalse" and w.source == f"{path}:make?pretrained=False"
    assert load_workload(w.source).name == "pFalse"
    assert load_workload(f"{path}?pretrained=True").source == f"{path}:make"
    with pytest.raises(WorkloadError, match=r"zoo:mlp option hidden=True is not a positive integer"):
        load_workload("zoo:mlp?hidden=true")


STRING_OPTIONS = """
    import torch
    import dlperf

    def digits(metric: str = "acc", tag="t", note: str | None = None, width: int = 4, scale=1.0) -> dlperf.Workload:
        seen = (metric, tag, note, width, scale)
        return dlperf.Workload(name=repr(seen), make_model=lambda: torch.nn.Linear(4, 1),
                               make_inputs=lambda b: (torch.zeros(b, 4),))
"""


@pytest.mark.parametrize("future", ["", "from __future__ import annotations\n"])
def test_a_string_parameter_gets_the_option_as_written(tmp_path: Path, future: str) -> None:
    """'?metric=nan' passed float NaN to `metric: str` (the user's code failed with KeyError: nan), and '?metric=1e5'
    the float 100000.0: a spec's value was read as a number whatever the parameter takes."""
    path = write(tmp_path, "wl.py", future + textwrap.dedent(STRING_OPTIONS))
    w = load_workload(f"{path}:digits?metric=nan&tag=1e5&note=inf&width=7&scale=2")
    assert w.name == repr(("nan", "1e5", "inf", 7, 2))
    # the source carries them back as strings (before, a string reading as a number left no source)
    assert w.source == f"{path}:digits?metric=nan&tag=1e5&note=inf&width=7&scale=2"
    assert load_workload(w.source).name == w.name
    assert load_workload(f"{path}:digits?metric=true").name == repr(("true", "t", None, 4, 1.0))
    # keyword options are Python values, passed as they are
    assert load_workload(f"{path}:digits", metric=3).source == ""


def test_an_annotation_that_cannot_be_evaluated_is_read_as_text(tmp_path: Path) -> None:
    path = write(tmp_path, "wl.py", """
        from __future__ import annotations
        from typing import TYPE_CHECKING
        import torch
        import dlperf

        if TYPE_CHECKING:
            from mypackage import Size

        def make(metric: str = "acc", size: Size = 2, other: Missing = "x") -> dlperf.Workload:
            return dlperf.Workload(name=repr((metric, size, other)), make_model=lambda: torch.nn.Linear(4, 1),
                                   make_inputs=lambda b: (torch.zeros(b, 4),))
    """)
    assert load_workload(f"{path}?metric=nan&size=3&other=5").name == repr(("nan", 3, 5))


def test_options_for_a_workload_that_takes_none_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "wl.py", WORKLOAD_VARIABLE)
    with pytest.raises(WorkloadError, match=r"is a dlperf.Workload value, which takes no options \(width\)"):
        load_workload(f"{path}?width=3")
    funcs = write(tmp_path, "funcs.py", """
        import torch
        def model():
            return torch.nn.Linear(4, 2)
        def inputs(batch_size):
            return (torch.ones(batch_size, 4),)
    """)
    with pytest.raises(WorkloadError, match=r"defines model\(\) and inputs\(\), which take no options \(width\)"):
        load_workload(str(funcs), width=3)


@pytest.mark.parametrize(("extra", "message"), [
    ("evaluate = 3", r"`evaluate` must be a function evaluate\(predict\) returning the metric, got"),
    ("def evaluate(predict):\n    return 1.0\nMETRIC = 5", r"`METRIC` must be the metric's name as a non-empty "
                                                          r"string, got 5"),
    ("def evaluate(predict):\n    return 1.0\nHIGHER_IS_BETTER = 'no'", r"`HIGHER_IS_BETTER` must be True or False, "
                                                                     r"got 'no'"),
    ("METRIC = 'accuracy'", r"sets METRIC or HIGHER_IS_BETTER but defines no evaluate\(predict\)"),
])
def test_a_functions_files_metric_settings_are_checked_by_name(tmp_path: Path, extra: str, message: str) -> None:
    """A non-callable evaluate was silently no metric (fidelity then stood in for the user's accuracy), and a bad
    METRIC came out as 'EvalSpec: metric_name must be ...', naming neither the file nor its variable."""
    path = tmp_path / "funcs.py"
    path.write_text("import torch\ndef model():\n    return torch.nn.Linear(3, 1)\n"
                    "def inputs(batch_size):\n    return (torch.ones(batch_size, 3),)\n" + extra + "\n")
    with pytest.raises(WorkloadError, match=rf"workload file '.*funcs\.py'.*{message}"):
        load_workload(str(path))


def test_model_and_inputs_functions(tmp_path: Path) -> None:
    path = write(tmp_path, "funcs.py", """
        import torch
        from torch import nn

        METRIC = "neg_mse"
        KIND = "mlp"

        def model():
            torch.manual_seed(0)
            return nn.Linear(3, 1)

        def inputs(batch_size):
            return (torch.ones(batch_size, 3),)

        def evaluate(predict):
            with torch.no_grad():
                return -float(predict(torch.ones(2, 3)).pow(2).mean())
    """)
    w = load_workload(str(path))
    assert w.name == "funcs"
    assert w.kind == "mlp"
    assert w.eval is not None and w.eval.metric_name == "neg_mse"
    model = w.build_model()
    with torch.no_grad():
        expected = -float(model(torch.ones(2, 3)).pow(2).mean())
    assert w.eval.evaluate(model) == pytest.approx(expected)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.py"
    with pytest.raises(WorkloadError, match=r"nowhere\.py' does not exist"):
        load_workload(str(missing))


def test_bare_name_suggests_the_zoo() -> None:
    with pytest.raises(WorkloadError, match=r"zoo:NAME"):
        load_workload("resnet")
    with pytest.raises(WorkloadError, match=r"^workload file 'minilm' does not exist: did you mean "
                                            r"zoo:minilm\?seq_len=64\? \(`dlperf zoo` lists the built-in workloads\)$"):
        load_workload("minilm?seq_len=64")


def test_a_workload_file_imports_a_module_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As `python wl.py` would: the file's folder is importable (ModuleNotFoundError from any working directory)."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "dlperf_test_sibling_net", raising=False)
    monkeypatch.chdir(tmp_path.parent)
    write(tmp_path, "dlperf_test_sibling_net.py", """
        import torch

        def build():
            return torch.nn.Linear(4, 2)
    """)
    write(tmp_path, "wl.py", """
        import torch
        from dlperf_test_sibling_net import build

        def model():
            return build()

        def inputs(batch_size):
            return (torch.ones(batch_size, 4),)
    """)
    w = load_workload(f"{tmp_path.name}/wl.py")
    assert w.check(w.build_model(), w.example_inputs(2)).shape == (2, 2)
    monkeypatch.delitem(sys.modules, "dlperf_test_sibling_net", raising=False)


def test_a_file_is_imported_under_its_own_name_unless_that_name_is_taken(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own name lets a spawned process unpickle what it defines; a taken name (json) keeps a private one."""
    import json
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "dlperf_test_own_name", raising=False)
    own = load_workload(write(tmp_path, "dlperf_test_own_name.py", WORKLOAD_VARIABLE))
    assert own.make_model.__module__ == "dlperf_test_own_name"
    monkeypatch.delitem(sys.modules, "dlperf_test_own_name")
    taken = load_workload(write(tmp_path, "json.py", WORKLOAD_VARIABLE))
    assert taken.make_model.__module__.startswith("dlperf_user_")
    assert sys.modules["json"] is json


def test_a_path_object_is_a_spec(tmp_path: Path) -> None:
    path = write(tmp_path, "wl.py", WORKLOAD_VARIABLE + "\n    answer = 42\n")
    assert load_workload(path).name == "tiny"
    with pytest.raises(WorkloadError, match=r"wl\.py:answer' is int 42, not a dlperf.Workload or a function "):
        load_workload(f"{path}:answer")


def test_a_folder_with_a_colon_stays_in_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "runs:v2"
    folder.mkdir()
    path = write(folder, "wl.py", WORKLOAD_VARIABLE)
    assert load_workload(str(path)).name == "tiny"
    w = load_workload(f"{path}:workload")
    assert w.source == f"{path}:workload"
    assert load_workload(w.source).name == "tiny"
    # and a '?' in a folder's name: the options follow the file's name
    odd = tmp_path / "what?v=1"
    odd.mkdir()
    fn = write(odd, "fn.py", FUNCTION_WITH_OPTIONS)
    made = load_workload(f"{fn}:make?width=5")
    assert made.name == "w5-1.0-relu" and made.source == f"{fn}:make?width=5"
    assert load_workload(made.source).name == "w5-1.0-relu"


def test_an_options_value_may_hold_a_path(tmp_path: Path) -> None:
    """A spec was split at the last '/', inside the value of '?ckpt=runs/best.pt': "workload file
    'wl.py?ckpt=runs/best.pt' does not exist". A workload given such a value from Python got a source that did not
    load back, and optimize's candidate processes and exported recipes rebuild it from there."""
    from dlperf.workload.loader import canonical_spec, code_fingerprint, split_canonical

    path = write(tmp_path, "fn.py", FUNCTION_WITH_OPTIONS)
    assert load_workload(f"{path}?act=runs/best.pt").name == "w4-1.0-runs/best.pt"
    made = load_workload(str(path), act="/data/x.pt")
    assert made.source == f"{path}:make?act=/data/x.pt"
    assert load_workload(made.source).name == "w4-1.0-/data/x.pt"
    assert split_canonical(made.source) == (str(path), "make", {"act": "/data/x.pt"})
    assert canonical_spec(made.source) == made.source
    assert code_fingerprint(made.source) == code_fingerprint(str(path))


def test_a_folder_named_like_a_python_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "wl.py").mkdir()
    with pytest.raises(WorkloadError, match=r"wl\.py' is a folder, not a file: point at a \.py file"):
        load_workload(str(tmp_path / "wl.py"))


def test_an_artifact_folder_is_named_as_one_with_the_ways_to_measure_it(tmp_path: Path) -> None:
    """`dlperf profile DIR` of an exported artifact said "is a folder, not a file: point at a .py file"."""
    (tmp_path / "art").mkdir()
    (tmp_path / "art" / "manifest.json").write_text("{}")
    with pytest.raises(WorkloadError, match=r"art' is an artifact folder \(its manifest.json, written by dlperf "
                                            r"optimize\), not a workload: `dlperf bench .*art` measures it"):
        load_workload(str(tmp_path / "art"))


def test_an_optimize_work_folder_and_a_candidate_s_folder_point_at_the_artifact_inside(tmp_path: Path) -> None:
    """`dlperf bench optimize/RUN/KEY`, a candidate's folder under the "candidates' artifacts: DIR" line optimize
    prints, said "is a folder, not a file: point at a .py file"; its artifact is in KEY/artifact."""
    (tmp_path / "run" / "4a3eb791c27d" / "artifact").mkdir(parents=True)
    (tmp_path / "run" / "4a3eb791c27d" / "artifact" / "manifest.json").write_text("{}")
    with pytest.raises(WorkloadError, match=r"4a3eb791c27d' is a candidate's folder of a dlperf optimize search, not "
                                            r"a workload: its artifact is '.*4a3eb791c27d/artifact' \(`dlperf bench"):
        load_workload(str(tmp_path / "run" / "4a3eb791c27d"))
    with pytest.raises(WorkloadError, match=r"run' is the work folder of a dlperf optimize search, not a workload: "
                                            r"each candidate's artifact is in .*run/KEY/artifact"):
        load_workload(str(tmp_path / "run"))


def test_unknown_attribute_lists_the_workloads_found(tmp_path: Path) -> None:
    path = write(tmp_path, "wl.py", WORKLOAD_VARIABLE)
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{path}:nosuch")
    assert "defines no 'nosuch'" in str(info.value)
    assert "workloads found there: workload" in str(info.value)


def test_a_model_and_inputs_file_named_with_a_workload_says_to_pass_the_file_alone(tmp_path: Path) -> None:
    """'wl.py:model' read "returned Linear, not a dlperf.Workload", and 'wl.py:nope' "workloads found there: none"."""
    path = write(tmp_path, "funcs.py", """
        import torch

        def model():
            return torch.nn.Linear(4, 2)

        def inputs(batch_size):
            return (torch.ones(batch_size, 4),)
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{path}:model")
    assert str(info.value) == (f"workload file '{path}' defines model() and inputs(), which make one workload: "
                               f"pass {path} alone, not {path}:model")
    with pytest.raises(WorkloadError, match=r"\(workloads found there: none\); it defines model\(\) and inputs\(\): "
                                            r"pass .*funcs\.py alone$"):
        load_workload(f"{path}:nope")


def test_two_workloads_ask_to_pick(tmp_path: Path) -> None:
    path = write(tmp_path, "two.py", WORKLOAD_VARIABLE + "\n    small = workload\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "several workloads (workload, small)" in message
    assert f"{path}:NAME" in message
    assert load_workload(f"{path}:small").name == "tiny"


def test_file_without_workload_says_how_to_write_one(tmp_path: Path) -> None:
    path = write(tmp_path, "empty.py", "x = 1\n")
    with pytest.raises(WorkloadError, match=r"defines no workload: define `workload = dlperf.Workload"):
        load_workload(str(path))
    # half of the functions form: the missing one is named
    path = write(tmp_path, "half.py", "import torch\n\ndef model():\n    return torch.nn.Linear(4, 2)\n\n"
                                      "def make_inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n")
    with pytest.raises(WorkloadError, match=r"defines no workload \(it defines model\(\) but no inputs\(\)\): "):
        load_workload(str(path))
    # the Workload's field names as the file's functions: the line that makes the workload of them
    path = write(tmp_path, "fields.py", "import torch\n\ndef make_model():\n    return torch.nn.Linear(4, 2)\n\n"
                                        "def make_inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    line = 'workload = dlperf.Workload(name="fields", make_model=make_model, make_inputs=make_inputs)'
    assert f"defines make_model() and make_inputs(), the fields of dlperf.Workload, but no workload: add `{line}`" \
        in str(info.value)
    path.write_text(path.read_text() + f"\nimport dlperf\n{line}\n")  # the line as given makes a workload
    assert load_workload(str(path)).name == "fields"


def test_import_error_shows_the_users_line(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.py", "import torch\nvalue = 1 / 0\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "ZeroDivisionError" in message
    assert f'File "{path}", line 2' in message
    assert "value = 1 / 0" in message


def test_a_file_that_exits_while_importing_is_named(tmp_path: Path) -> None:
    """sys.exit() at module level ended dlperf with the user's message and exit 1, naming no file."""
    path = write(tmp_path, "exits.py", """
        import sys
        sys.exit("needs a GPU")
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert str(info.value).splitlines() == [
        f"workload file '{path}' exited while importing (SystemExit: needs a GPU): dlperf imports the file, it "
        "does not run it; put command-line parsing and sys.exit() under `if __name__ == \"__main__\":`",
        f'  File "{path}", line 3, in <module>', '    sys.exit("needs a GPU")']


def test_argparse_in_a_workload_file_is_folded_into_the_one_error(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """argparse printed "dlperf: error: the following arguments are required: --data" (read as dlperf's own usage
    error) before dlperf's message; its message is now part of that one error, and argparse is itself again."""
    import argparse

    path = write(tmp_path, "cli.py", """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--data", required=True)
        args = parser.parse_args()
    """)
    with pytest.raises(WorkloadError, match=r"exited while importing \(SystemExit: 2, argparse: the following "
                                            r"arguments are required: --data\): dlperf imports the file"):
        load_workload(str(path))
    assert capsys.readouterr().err == ""
    parser = argparse.ArgumentParser(prog="mine")
    with pytest.raises(SystemExit):
        parser.error("own")
    assert "mine: error: own" in capsys.readouterr().err


def test_syntax_error_shows_the_users_line(tmp_path: Path) -> None:
    path = write(tmp_path, "typo.py", "import torch\nworkload = (\n")
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "raised SyntaxError while importing" in message
    assert f'File "{path}", line 2' in message


def test_model_factory_raising_shows_the_users_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad_factory.py", """
        import torch
        from dlperf import Workload

        def build():
            raise RuntimeError("weights file missing")

        workload = Workload(name="bad", make_model=build, make_inputs=lambda b: (torch.ones(b, 2),))
    """)
    w = load_workload(str(path))
    with pytest.raises(WorkloadError) as info:
        w.build_model()
    message = str(info.value)
    assert "its model factory raised RuntimeError: weights file missing" in message
    assert f'File "{path}", line 6, in build' in message


def test_workload_function_raising_shows_the_users_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad_fn.py", """
        from dlperf import Workload

        def make() -> Workload:
            raise ValueError("no data folder")
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "raised ValueError: no data folder" in message
    assert f'File "{path}", line 5, in make' in message


def test_a_call_that_fails_at_the_call_points_at_the_users_definition_not_at_dlperf(tmp_path: Path) -> None:
    """A factory or forward called with the wrong arguments has no frame of its own: the error showed the line in
    dlperf's base.py that called it."""
    path = write(tmp_path, "arity.py", """
        import torch

        class Net(torch.nn.Module):
            def forward(self, x, mask):
                return x

        def model():
            return Net()

        def inputs():
            return (torch.ones(1, 4),)
    """)
    w = load_workload(str(path))
    with pytest.raises(WorkloadError) as info:
        w.example_inputs(2)
    assert str(info.value).splitlines()[1:] == [f'  File "{path}", line 11, in inputs', "    def inputs():"]
    with pytest.raises(WorkloadError) as info:
        w.check(w.build_model(), (torch.ones(2, 4),))
    assert str(info.value).splitlines()[1:] == [f'  File "{path}", line 5, in forward',
                                                "    def forward(self, x, mask):"]


def test_user_frame_is_found_in_a_project_folder_named_dlperf(tmp_path: Path) -> None:
    project = tmp_path / "dlperf"
    project.mkdir()
    path = write(project, "bad.py", """
        import torch
        from dlperf import Workload

        def build():
            raise RuntimeError("boom")

        workload = Workload(name="bad", make_model=build, make_inputs=lambda b: (torch.ones(b, 2),))
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path)).build_model()
    assert f'File "{path}", line 6, in build' in str(info.value)


def test_the_users_line_is_shown_when_the_standard_library_raises(tmp_path: Path) -> None:
    """A missing checkpoint read with pathlib showed pathlib.py's io.open line, not the user's."""
    path = write(tmp_path, "ckpt.py", """
        from pathlib import Path
        import torch

        def model():
            Path("checkpoints/missing.pt").read_bytes()
            return torch.nn.Linear(4, 2)

        def inputs(batch_size):
            return (torch.ones(batch_size, 4),)
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path)).build_model()
    assert str(info.value).splitlines()[1:] == [f'  File "{path}", line 6, in model',
                                                '    Path("checkpoints/missing.pt").read_bytes()']


def test_user_frame_is_found_in_a_project_folder_named_torch(tmp_path: Path) -> None:
    """Any '/torch/' in a path counted as torch's own code: the error showed torch's linear.py, not the user's line."""
    project = tmp_path / "torch"
    project.mkdir()
    path = write(project, "bad.py", """
        import torch
        from dlperf import Workload

        def build():
            return torch.nn.Linear(4, 2)(torch.ones(3))

        workload = Workload(name="bad", make_model=build, make_inputs=lambda b: (torch.ones(b, 2),))
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path)).build_model()
    assert str(info.value).splitlines()[1] == f'  File "{path}", line 6, in build'


def test_factory_returning_a_non_module_is_rejected() -> None:
    w = Workload(name="odd", make_model=lambda: "not a model", make_inputs=lambda b: ())  # type: ignore[arg-type,return-value]
    with pytest.raises(WorkloadError, match=r"returned str, not a torch\.nn\.Module"):
        w.build_model()


def _scored(evaluate: Any) -> Workload:
    from dlperf.workload import EvalSpec

    return Workload(name="scored", make_model=lambda: nn.Linear(2, 2), make_inputs=lambda b: (torch.ones(b, 2),),
                    eval=EvalSpec(evaluate=evaluate, metric_name="accuracy"))


def test_score_turns_the_metric_into_a_float() -> None:
    assert _scored(lambda predict: torch.tensor(0.75)).score(nn.Identity()) == 0.75
    assert _scored(lambda predict: 1).score(nn.Identity()) == 1.0
    assert torch.isnan(torch.tensor(_scored(lambda predict: float("nan")).score(nn.Identity())))  # a candidate's


@pytest.mark.parametrize(("returned", "shown"), [("0.9", "str '0.9'"), (None, "None"),
                                                 (torch.ones(3), "Tensor float32[3]"), ([1, 2], "list [1, 2]")])
def test_score_refuses_what_is_not_a_number(returned: Any, shown: str) -> None:
    with pytest.raises(WorkloadError) as info:
        _scored(lambda predict: returned).score(nn.Identity())
    assert str(info.value) == (f"workload 'scored': its evaluate function returned {shown}, not a number: "
                               "return the metric 'accuracy' as a float")


def test_an_evaluate_that_raises_shows_the_users_line(tmp_path: Path) -> None:
    path = write(tmp_path, "ev.py", """
        import torch

        def model():
            return torch.nn.Linear(4, 2)

        def inputs(batch_size):
            return (torch.ones(batch_size, 4),)

        def evaluate(predict):
            raise KeyError("labels")
    """)
    w = load_workload(str(path))
    with pytest.raises(WorkloadError) as info:
        w.score(w.build_model())
    assert str(info.value).splitlines()[:2] == ["workload 'ev': its evaluate function raised KeyError: 'labels'",
                                                f'  File "{path}", line 11, in evaluate']


def _linear() -> nn.Module:
    return nn.Linear(2, 2)


def _ones(batch_size: int) -> tuple[torch.Tensor, ...]:
    return (torch.ones(batch_size, 2),)


@pytest.mark.parametrize(("fields", "message"), [
    ({"kind": "transfomer"},
     "Workload 'w': kind 'transfomer' is unknown: choose one of cnn, transformer, mlp, generic"),
    ({"default_batch_size": 0}, "Workload 'w': default_batch_size must be a positive integer, got 0"),
    ({"default_batch_size": True}, "Workload 'w': default_batch_size must be a positive integer, got True"),
    ({"make_model": nn.Linear(2, 2)}, "Workload 'w': make_model must be a function returning a fresh nn.Module, got "
                                      "the module Linear itself: give a function that builds and returns it"),
    ({"make_inputs": torch.ones(1, 2)}, "Workload 'w': make_inputs must be a function make_inputs(batch_size) "
                                        "returning the positional inputs of one call, got Tensor float32[1, 2]"),
    ({"input_names": "image"}, "Workload 'w': input_names must be a tuple of strings, e.g. ('x',), got 'image'"),
    ({"output_names": None}, "Workload 'w': output_names must be a tuple of strings, e.g. ('x',), got None"),
    ({"eval": lambda predict: 1.0}, "Workload 'w': eval must be a dlperf.EvalSpec or None, got function"),
    ({"name": ""}, "Workload: name must be a non-empty string, got ''"),
])
def test_a_workloads_fields_are_checked_when_it_is_made(fields: dict[str, Any], message: str) -> None:
    """A typo in kind skipped passes silently (channels_last, ORT's transformer fusions); the others failed later,
    far from the line that made them."""
    with pytest.raises(WorkloadError) as info:
        Workload(**{"name": "w", "make_model": _linear, "make_inputs": _ones, **fields})
    assert str(info.value) == message


def test_eval_and_train_specs_are_checked_when_they_are_made() -> None:
    from dlperf.workload import EvalSpec, TrainSpec

    with pytest.raises(WorkloadError, match=r"^EvalSpec: evaluate must be a function evaluate\(predict\) -> float, "
                                            r"got float 0.9$"):
        EvalSpec(evaluate=0.9, metric_name="accuracy")  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match=r"^EvalSpec: metric_name must be a non-empty string, got ''$"):
        EvalSpec(evaluate=lambda predict: 1.0, metric_name="")
    with pytest.raises(WorkloadError, match=r"^TrainSpec: batch_size must be a positive integer, got 0$"):
        TrainSpec(make_loader=lambda b: [], loss_fn=nn.CrossEntropyLoss(),
                  make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), batch_size=0)
    # a loss module is a function of (output, target): callable, and fine
    assert TrainSpec(make_loader=lambda b: [], loss_fn=nn.CrossEntropyLoss(),
                     make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1)).batch_size == 32


def test_a_loss_fn_that_cannot_take_output_and_target_is_refused_when_the_spec_is_made() -> None:
    """A one-parameter loss failed in the first training step with Python's TypeError ('loss() takes 1 positional
    argument but 2 were given'), and a loss class with torch's 'Boolean value of Tensor ... is ambiguous'."""
    from dlperf.workload import TrainSpec

    def spec(loss_fn: Any) -> TrainSpec:
        return TrainSpec(make_loader=lambda b: [], loss_fn=loss_fn, make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1))

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.sum()

    with pytest.raises(WorkloadError, match=r"^TrainSpec: loss_fn .*loss\(out: 'torch.Tensor'\) -> 'torch.Tensor' "
                                            r"cannot be called with two arguments: dlperf calls loss_fn\(output, "
                                            r"target\): the model's output and the batch's target"):
        spec(loss)

    class OneInput(nn.Module):
        def forward(self, out: torch.Tensor) -> torch.Tensor:
            return out.sum()

    with pytest.raises(WorkloadError, match=r"^TrainSpec: loss_fn OneInput\(out: 'torch.Tensor'\)"):
        spec(OneInput())
    with pytest.raises(WorkloadError, match=r"^TrainSpec: loss_fn is the class CrossEntropyLoss, not a loss: give an "
                                            r"instance, loss_fn=CrossEntropyLoss\(\)"):
        spec(nn.CrossEntropyLoss)
    # two parameters, more with defaults, *args, a loss module, a builtin (no signature to read): all fine
    for fine in (lambda o, y: o.sum(), lambda o, y, reduction="mean": o.sum(), lambda *args: args[0].sum(),
                 nn.MSELoss(), torch.nn.functional.cross_entropy, torch.sub):
        assert spec(fine).loss_fn is fine


def test_a_file_whose_model_is_a_module_not_a_function_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, "inst.py", """
        import torch
        model = torch.nn.Linear(4, 2)

        def inputs(batch_size):
            return (torch.ones(batch_size, 4),)
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert str(info.value) == (f"workload file '{path}': `model` must be a function model() returning the model, "
                               "got the module Linear itself: give a function that builds and returns it")


def test_inputs_that_are_none_or_hold_no_data_are_refused() -> None:
    """A meta tensor failed deep in the benchmark ('Cannot copy out of meta tensor', a traceback, exit 1)."""
    with pytest.raises(WorkloadError, match=r"^workload 'w': its inputs factory returned None: return the "):
        Workload(name="w", make_model=_linear, make_inputs=lambda b: None).example_inputs(2)  # type: ignore[arg-type,return-value]
    meta = Workload(name="w", make_model=_linear,
                    make_inputs=lambda b: (torch.ones(b, 2), torch.ones(b, 2, device="meta")))
    with pytest.raises(WorkloadError) as info:
        meta.example_inputs(2)
    assert str(info.value) == ("workload 'w': its input 1 is on the 'meta' device, which holds no data "
                               "(input 0: float32[2, 2], input 1: float32[2, 2]): create the inputs on the CPU")


def test_check_names_each_input_and_its_shape() -> None:
    w = load_workload("zoo:mlp")
    model = w.build_model()
    bad = (torch.ones(2, 5),)
    with pytest.raises(WorkloadError) as info:
        w.check(model, bad)
    message = str(info.value)
    assert "rejected its example inputs (input 0 (x): float32[2, 5])" in message
    assert "RuntimeError" in message
    assert "returned a list" not in message


def test_a_list_of_inputs_is_one_argument_and_the_error_says_so() -> None:
    class TwoArgs(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

    w = Workload(name="pair", make_model=TwoArgs, make_inputs=lambda b: [torch.ones(b, 2), torch.ones(b, 2)])  # type: ignore[arg-type,return-value]
    inputs = w.example_inputs(2)
    assert len(inputs) == 1 and isinstance(inputs[0], list)
    with pytest.raises(WorkloadError, match="returned a list, which is passed as ONE argument: return a tuple"):
        w.check(w.build_model(), inputs)


def test_describe_inputs_names_dtypes_and_shapes() -> None:
    text = describe_inputs((torch.zeros(2, 3, dtype=torch.int64), 7), ("ids", "n"))
    assert text == "input 0 (ids): int64[2, 3], input 1 (n): int"


def test_describe_inputs_shows_what_a_list_or_dict_holds() -> None:
    """A list input read 'input 0: list', so the batch-size error did not show the shapes it was about."""
    text = describe_inputs(([torch.ones(2, 4), torch.ones(1, 4)], {"ids": torch.ones(2, 3, dtype=torch.int64)}))
    assert text == "input 0: list of 2 (float32[2, 4], float32[1, 4]), input 1: dict of 1 (ids: int64[2, 3])"


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(WorkloadError, match="batch size must be >= 1, got 0"):
        load_workload("zoo:mlp").example_inputs(0)


def test_zoo_typo_lists_the_names_and_the_close_one() -> None:
    """The names were listed, but not the close match `--passes hygeine` suggests."""
    with pytest.raises(WorkloadError) as info:
        load_workload("zoo:resnet")
    assert ("no zoo workload 'resnet': did you mean resnet18? choose one of mlp, digits-cnn, resnet18, minilm"
            in str(info.value))
    with pytest.raises(WorkloadError) as info:
        load_workload("zoo:nope")  # nothing close: no guess
    assert "no zoo workload 'nope': choose one of mlp, " in str(info.value)


def test_bad_zoo_option_names_it_and_the_options_taken() -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload("zoo:mlp?hiden=3")
    assert str(info.value) == ("zoo:mlp has no option 'hiden': did you mean 'hidden'? "
                               "its options are in_features, hidden, classes")
    with pytest.raises(WorkloadError, match=r"^zoo:digits-cnn has no option 'x': it takes none$"):
        load_workload("zoo:digits-cnn", x=1)


def test_a_zoo_option_given_twice_or_without_a_name_is_refused() -> None:
    with pytest.raises(WorkloadError, match=r"option 'hidden' is given twice in 'mlp\?hidden=8&hidden=9'"):
        load_workload("zoo:mlp?hidden=8&hidden=9")
    with pytest.raises(WorkloadError, match=r"option '=3' in 'mlp\?=3' has no name: write key=value"):
        load_workload("zoo:mlp?=3")


def test_an_option_without_a_default_must_be_given(tmp_path: Path) -> None:
    path = write(tmp_path, "need.py", """
        import torch
        import dlperf

        def make(width: int, depth: int = 2) -> dlperf.Workload:
            return dlperf.Workload(name=f"w{width}", make_model=lambda: torch.nn.Linear(width, 1),
                                   make_inputs=lambda b: (torch.zeros(b, width),))
    """)
    with pytest.raises(WorkloadError) as info:
        load_workload(str(path))
    assert str(info.value) == (f"workload '{path}:make' needs the option width, which has no default: "
                               "give it as ?width=VALUE")
    assert load_workload(f"{path}?width=3").name == "w3"


def test_higher_is_better_must_be_a_bool() -> None:
    from dlperf.workload import EvalSpec

    with pytest.raises(WorkloadError, match=r"^EvalSpec: higher_is_better must be True or False, got 'False'$"):
        EvalSpec(evaluate=lambda predict: 1.0, metric_name="loss", higher_is_better="False")  # type: ignore[arg-type]


def test_a_functions_unknown_option_is_named_before_it_is_called(tmp_path: Path) -> None:
    path = write(tmp_path, "fn.py", FUNCTION_WITH_OPTIONS)
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{path}?widht=3")
    assert str(info.value) == (f"workload '{path}:make' has no option 'widht': did you mean 'width'? "
                               "its options are width, scale, act")


def test_zoo_option_without_value() -> None:
    with pytest.raises(WorkloadError, match="has no value: write key=value"):
        load_workload("zoo:mlp?hidden")


def test_zoo_options_are_parsed_as_numbers() -> None:
    w = load_workload("zoo:mlp?hidden=32&in_features=8")
    model: Any = w.build_model()
    (x,) = w.example_inputs(2)
    assert x.shape == (2, 8)
    assert model[0].out_features == 32


@pytest.mark.parametrize(("spec", "source"), [
    ("zoo:mlp?hidden=32&in_features=8", "zoo:mlp?in_features=8&hidden=32"),
    ("zoo:mlp?hidden=256", "zoo:mlp"),  # a default is left out
    ("zoo:resnet18?image_size=64", "zoo:resnet18?image_size=64"),
])
def test_a_zoo_workloads_source_keeps_its_options(spec: str, source: str) -> None:
    """mlp and resnet18 dropped their options from `source`, which stored runs and optimize's child processes
    rebuild from: zoo:mlp?hidden=1024 was stored and re-measured as zoo:mlp."""
    w = load_workload(spec)
    assert w.source == source
    again = load_workload(w.source)
    assert again.source == source and again.description == w.description
    assert [tuple(x.shape) for x in again.example_inputs(2)] == [tuple(x.shape) for x in w.example_inputs(2)]


def test_a_zoo_workloads_summary_says_its_options() -> None:
    assert "8 -> 32 -> 32 -> 10" in load_workload("zoo:mlp?hidden=32&in_features=8").description
    assert "64x64 images" in load_workload("zoo:resnet18?image_size=64").description


@pytest.mark.parametrize("spec", ["zoo:mlp?hidden=abc", "zoo:mlp?hidden=-5", "zoo:mlp?classes=2.5",
                                  "zoo:resnet18?image_size=0"])
def test_a_zoo_option_that_is_not_a_positive_integer_is_named(spec: str) -> None:
    key, value = spec.split("?")[1].split("=")
    with pytest.raises(WorkloadError, match=rf"option {key}=.*{value}.* is not a positive integer"):
        load_workload(spec)


def test_module_without_inputs_is_rejected() -> None:
    with pytest.raises(WorkloadError, match="without example inputs"):
        load_workload(nn.Linear(2, 2))


def test_from_module_resizes_the_batch() -> None:
    model = nn.Linear(3, 1)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    w = from_module(model, x, name="lin")
    assert w.name == "lin" and w.default_batch_size == 2
    built = w.build_model()
    assert isinstance(built, nn.Linear) and built is not model and torch.equal(built.weight, model.weight)
    (same,) = w.example_inputs(2)
    assert same is not x and torch.equal(same, x)  # a copy: a model working in place changed the caller's
    (bigger,) = w.example_inputs(5)
    assert bigger.shape == (5, 3)
    # rows cycle through the example batch
    assert torch.equal(bigger[2], x[0]) and torch.equal(bigger[3], x[1]) and torch.equal(bigger[4], x[0])
    (smaller,) = w.example_inputs(1)
    assert torch.equal(smaller, x[:1])


def test_measuring_and_optimizing_a_module_leave_the_callers_model_as_it_was() -> None:
    """from_module's factory returned the caller's own model: dlperf.bench(model, x) left it in eval mode (in the
    middle of a notebook's training: no more dropout, batch norm statistics frozen), and a pass that changes a
    model in place (pruning) would have changed the caller's weights."""
    from dlperf.passes.base import PassContext, apply_pass, initial_state
    from dlperf.passes.pruning import PruneConfig

    torch.manual_seed(0)
    first = nn.Linear(8, 16)
    model = nn.Sequential(first, nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 8)
    dlperf.bench(model, x, min_duration_s=0.0, min_iters=3, warmup_iters=1)
    assert model.training
    state = apply_pass(PruneConfig(amount=0.5, finetune_steps=0), initial_state(from_module(model, x)), PassContext())
    assert state.model[0].out_features == 8  # type: ignore[index]  # the copy was pruned
    assert first.out_features == 16 and model.training
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    # each build copies the model as it is then
    with torch.no_grad():
        first.bias.add_(1.0)
    rebuilt = from_module(model, x).build_model()
    assert isinstance(rebuilt, nn.Sequential) and isinstance(rebuilt[0], nn.Linear)
    assert torch.equal(rebuilt[0].bias, first.bias)


def test_a_single_sample_without_a_batch_dimension_is_refused() -> None:
    """dlperf.bench(Linear(8, 2), (torch.randn(8),)) took dim 0 as a batch of 8: the model ran one sample a call
    (output [2]) and items/s came out 8 times too high."""
    with pytest.raises(WorkloadError, match=r"^workload 'Linear': its example inputs look unbatched \(input 0: "
                                            r"float32\[8\]\): their first dimension was taken as the batch \(8\), "
                                            r"but no output of the model has 8 rows \(output: float32\[2\]\).*"
                                            r"x\.unsqueeze\(0\) for batch 1"):
        dlperf.bench(nn.Linear(8, 2), (torch.randn(8),), min_duration_s=0.0, min_iters=3, warmup_iters=0)
    image = from_module(nn.Conv2d(3, 4, 3), torch.randn(3, 8, 8), name="conv")  # torch runs an unbatched image
    with pytest.raises(WorkloadError, match=r"input 0: float32\[3, 8, 8\]\).*output: float32\[4, 6, 6\]"):
        image.check(image.build_model(), image.example_inputs(3))
    listed = from_module(nn.Identity(), ([torch.randn(8)],), name="listed")
    with pytest.raises(WorkloadError, match="look unbatched"):  # whatever the outputs are held in
        listed.check(lambda xs: {"y": (xs[0][:2],)}, listed.example_inputs(8))


class Halves(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sum(), x / 2


@pytest.mark.parametrize(("model", "x"), [
    (nn.Embedding(10, 3), torch.arange(6)),  # indices of shape [batch]: output [batch, 3]
    (Halves(), torch.randn(5)),  # outputs [] and [batch]
    (nn.Linear(8, 2), torch.randn(5, 8)),
    (lambda x: x.sum(), torch.randn(4, 3)),  # no output with rows tells nothing
])
def test_one_dimensional_batches_and_outputs_without_rows_are_measured(model: Any, x: torch.Tensor) -> None:
    w = from_module(model, (x,))
    for batch in (len(x), 1, 3):
        w.check(model, w.example_inputs(batch))
    # a workload that states its batch is not second-guessed
    stated = Workload(name="sum", make_model=lambda: nn.Linear(8, 2), make_inputs=lambda b: (torch.randn(b),))
    stated.check(lambda v: v[:2], stated.example_inputs(8))


def test_a_module_that_cannot_be_copied_is_refused_with_the_way_out() -> None:
    class Uncopyable(nn.Linear):
        def __deepcopy__(self, memo: dict[int, object]) -> Uncopyable:
            raise TypeError("cannot pickle '_thread.lock' object")

    w = from_module(Uncopyable(3, 1), torch.ones(2, 3), name="locked")
    with pytest.raises(WorkloadError, match=r"^model 'locked' cannot be copied \(TypeError: cannot pickle "
                                            r"'_thread.lock' object\); .* give a dlperf.Workload whose make_model"):
        w.build_model()


def test_from_module_resizes_tensors_inside_lists_and_dicts() -> None:
    """A model taking a list or a dict got its example batch at every batch size: bench at batch 8 ran batch-2
    calls and counted 8 items each (throughput 4x too high)."""
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    shared = torch.ones(4)  # not batched: left as it is
    listed = from_module(nn.Identity(), [x, x + 1])
    assert listed.default_batch_size == 2
    ((a, b),) = listed.example_inputs(5)
    assert a.shape == b.shape == (5, 4) and torch.equal(b[2], x[0] + 1)
    keyed = from_module(nn.Identity(), {"ids": x, "scale": shared})
    (d,) = keyed.example_inputs(3)
    assert d["ids"].shape == (3, 4) and torch.equal(d["scale"], shared)  # unbatched: kept as it is (a copy)


def test_inputs_inside_a_list_that_ignore_the_batch_size_are_refused() -> None:
    fixed = Workload(name="fixed", make_model=lambda: nn.Identity(), make_inputs=lambda b: ([torch.ones(2, 4)],))
    with pytest.raises(WorkloadError, match=r"inputs for batch size 8 have no batch dimension of 8"):
        fixed.example_inputs(8)
    # a list of per-item tensors (torchvision's detection models take one): its length is the batch
    items = Workload(name="items", make_model=lambda: nn.Identity(),
                     make_inputs=lambda b: ([torch.ones(3, 5, 7) for _ in range(b)],))
    assert len(items.example_inputs(8)[0]) == 8


def test_load_workload_passes_a_workload_through_and_wraps_modules() -> None:
    w = load_workload("zoo:mlp")
    assert load_workload(w) is w
    wrapped = load_workload(nn.Linear(4, 2), (torch.ones(3, 4),))
    assert wrapped.name == "Linear" and wrapped.example_inputs(6)[0].shape == (6, 4)


def test_example_inputs_or_options_that_would_be_ignored_are_refused() -> None:
    """dlperf.bench('zoo:mlp', x) measured the zoo's inputs and dropped x without a word."""
    x = torch.ones(2, 64)
    with pytest.raises(WorkloadError, match=r"^'zoo:mlp' makes its own inputs: example inputs are for an nn.Module "):
        load_workload("zoo:mlp", x)
    w = load_workload("zoo:mlp")
    with pytest.raises(WorkloadError, match=r"^workload 'mlp' makes its own inputs"):
        load_workload(w, x)
    with pytest.raises(WorkloadError, match=r"^workload 'mlp' is a dlperf.Workload already: it takes no options "
                                            r"\(hidden\)$"):
        load_workload(w, hidden=8)
    with pytest.raises(WorkloadError, match=r"^an nn.Module takes no options \(hidden\)"):
        load_workload(nn.Linear(64, 2), x, hidden=8)


def test_unsupported_spec_type() -> None:
    with pytest.raises(WorkloadError, match="cannot make a workload from int"):
        load_workload(42)


def test_inputs_that_ignore_the_batch_size_are_refused() -> None:
    """A factory returning one row whatever the batch size made bench report a batch-64 throughput 64x too high."""
    from dlperf.workload.base import Workload

    w = Workload(name="fixed", make_model=lambda: nn.Linear(64, 10), make_inputs=lambda b: (torch.randn(1, 64),))
    assert w.example_inputs(1)[0].shape == (1, 64)
    with pytest.raises(WorkloadError, match=r"no batch dimension of 64 \(input 0: float32\[1, 64\]\)"):
        w.example_inputs(64)
    scalar_too = Workload(name="aux", make_model=lambda: nn.Linear(4, 1),
                          make_inputs=lambda b: (torch.randn(b, 4), torch.tensor(0.5)))
    assert len(scalar_too.example_inputs(8)) == 2  # an auxiliary input beside a batched one is fine


def test_host_side_predict_brings_nested_outputs_back_keeping_their_types() -> None:
    """What an evaluate gets on a GPU (here the device is the host itself, so the structure is what is tested):
    a namedtuple stays one (it was rebuilt from one generator argument), a dict subclass keeps its type."""
    from collections import OrderedDict, namedtuple

    from dlperf.workload.base import _host_side

    Out = namedtuple("Out", "logits hidden")
    outputs = Out(torch.ones(2), [torch.zeros(1), {"a": torch.ones(1)}])
    got = _host_side(lambda x: outputs, "cpu")(torch.ones(1))
    assert isinstance(got, Out) and isinstance(got.hidden, list) and torch.equal(got.logits, torch.ones(2))
    ordered = OrderedDict(x=torch.ones(1))
    assert type(_host_side(lambda: ordered, "cpu")()) is OrderedDict


def test_a_spec_names_one_workload_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlperf.workload.loader import canonical_spec

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "wl.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    above = canonical_spec("p/wl.py:net?b=2&a=1")
    monkeypatch.chdir(tmp_path / "p")
    assert canonical_spec("wl.py:net?a=1&b=2") == above == f"{tmp_path / 'p' / 'wl.py'}:net?a=1&b=2"
    assert canonical_spec("wl.py") == str(tmp_path / "p" / "wl.py")
    assert canonical_spec("zoo:mlp?hidden=64") == "zoo:mlp?hidden=64"


@pytest.mark.parametrize(("inputs", "where"), [
    ((np.zeros((2, 4), np.float32),), "0"),
    ((torch.zeros(2, 4), np.zeros((2, 4))), "1"),
    (({"a": [torch.zeros(2, 4), np.zeros((2, 4))]},), "0['a'][1]"),
])
def test_numpy_example_inputs_are_refused_where_they_are(inputs: tuple[Any, ...], where: str) -> None:
    """dlperf.bench(model, (array,)) failed inside dlperf's own batch resizing, blamed on an 'inputs factory
    raised AttributeError: ... no attribute contiguous' the caller never wrote."""
    with pytest.raises(WorkloadError, match=rf"^example input {re.escape(where)} of 'lin' is a numpy array: give "
                                            r"torch tensors, e\.g\. torch\.from_numpy\(x\)$"):
        from_module(torch.nn.Linear(4, 2), inputs, name="lin")


def test_a_model_rejecting_numpy_inputs_from_a_factory_gets_the_hint() -> None:
    w = Workload(name="arr", make_model=lambda: torch.nn.Linear(4, 2),
                 make_inputs=lambda b: (np.zeros((b, 4), np.float32),))
    with pytest.raises(WorkloadError, match=r"its inputs include numpy arrays: return torch tensors "
                                            r"\(torch\.from_numpy\(x\)\)"):
        w.check(w.build_model(), w.example_inputs(1))


def test_a_workload_function_that_forgets_to_return_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, "noreturn.py", """
        import torch
        import dlperf

        def mynet(width: int = 8) -> dlperf.Workload:
            w = dlperf.Workload(name="mynet", make_model=lambda: torch.nn.Linear(4, width),
                                make_inputs=lambda b: (torch.randn(b, 4),))

        def five() -> dlperf.Workload:
            return 5
    """)
    with pytest.raises(WorkloadError, match=r"returned NoneType, not a dlperf\.Workload: it builds one but does not "
                                            r"return it\? end it with `return` of the Workload$"):
        load_workload(f"{path}:mynet")
    with pytest.raises(WorkloadError, match=r"returned int, not a dlperf\.Workload: make it return a "
                                            r"dlperf\.Workload\(\.\.\.\)$"):
        load_workload(f"{path}:five")


def test_a_one_dimensional_example_the_model_rejects_gets_the_batch_hint() -> None:
    """dlperf.bench(Linear(4, 2), (torch.randn(4),)) failed on 'input 0: float32[1]', a shape the caller never
    gave: dim 0 was taken as the batch and cut to the batch size."""
    w = from_module(torch.nn.Linear(4, 2), (torch.randn(4),), name="lin")
    with pytest.raises(WorkloadError, match=r"input 0: float32\[1\].*a 1-D input is a batch of scalars: give one "
                                            r"sample a batch dimension, e\.g\. x\.unsqueeze\(0\)"):
        w.check(w.build_model(), w.example_inputs(1))


def test_options_typed_outside_the_spec_are_refused_where_no_option_is_taken() -> None:
    """`dlperf ab`'s option.NAME=VALUE reaches load_workload as option_texts: a Workload or an nn.Module dropped them
    without a word, and both sides of the A/B measured the same workload."""
    w = load_workload("zoo:mlp")
    with pytest.raises(WorkloadError, match=r"^workload 'mlp' is a dlperf.Workload already: it takes no options "
                                            r"\(hidden\)$"):
        load_workload(w, option_texts={"hidden": "8"})
    with pytest.raises(WorkloadError, match=r"^an nn.Module takes no options \(hidden\)"):
        load_workload(nn.Linear(64, 2), torch.ones(2, 64), option_texts={"hidden": "8"})


def test_options_given_outside_the_spec_win_over_the_specs_own(tmp_path: Path) -> None:
    """option_texts (dlperf ab's option.NAME=VALUE) and keyword options from Python both override a ?NAME=VALUE
    written in the spec, for the zoo and for a file."""
    assert load_workload("zoo:mlp?hidden=32", option_texts={"hidden": "16"}).source == "zoo:mlp?hidden=16"
    assert load_workload("zoo:mlp?hidden=32", hidden=16).source == "zoo:mlp?hidden=16"
    path = write(tmp_path, "fn.py", FUNCTION_WITH_OPTIONS)
    assert load_workload(f"{path}?width=3", width=5).name == "w5-1.0-relu"
    assert load_workload(f"{path}?width=3", option_texts={"width": "5"}).name == "w5-1.0-relu"


def test_an_empty_option_is_skipped_and_a_value_may_hold_an_equals_sign(tmp_path: Path) -> None:
    assert load_workload("zoo:mlp?hidden=32&").source == "zoo:mlp?hidden=32"
    path = write(tmp_path, "fn.py", FUNCTION_WITH_OPTIONS)
    assert load_workload(f"{path}:make?act=a=b").name == "w4-1.0-a=b"


def test_a_function_taking_keyword_arguments_gets_any_option(tmp_path: Path) -> None:
    path = write(tmp_path, "kw.py", """
        import torch
        import dlperf

        def make(**options) -> dlperf.Workload:
            width = int(options.get("width", 4))
            return dlperf.Workload(name=f"w{width}", make_model=lambda: torch.nn.Linear(width, 1),
                                   make_inputs=lambda b: (torch.zeros(b, width),))
    """)
    assert load_workload(f"{path}?width=6").name == "w6"


Pair = namedtuple("Pair", "x y")


class AddPair(nn.Module):
    def forward(self, pair: Pair) -> torch.Tensor:
        return pair.x + pair.y


def test_a_namedtuple_example_input_stays_one_at_every_batch_size() -> None:
    """The model reads its fields by name: as a plain tuple it raised AttributeError at every batch size."""
    w = from_module(AddPair(), (Pair(torch.ones(2, 3), torch.ones(2, 3)),))
    for batch_size in (2, 5):
        (pair,) = w.example_inputs(batch_size)
        assert isinstance(pair, Pair) and pair.x.shape == (batch_size, 3)
        assert w.check(w.build_model(), (pair,)).shape == (batch_size, 3)


def test_a_file_whose_name_holds_a_colon_is_loaded_as_that_file(tmp_path: Path) -> None:
    path = write(tmp_path, "wl:v2.py", WORKLOAD_VARIABLE)
    assert load_workload(str(path)).name == "tiny"


def test_a_windows_path_keeps_its_drive_and_takes_a_name_after_the_file() -> None:
    from dlperf.workload.loader import split_canonical

    assert split_canonical("C:\\runs\\wl.py") == ("C:\\runs\\wl.py", "", {})
    assert split_canonical("C:\\runs\\wl.py:small?width=2") == ("C:\\runs\\wl.py", "small", {"width": 2})


def test_a_spec_that_names_no_python_file_is_left_as_given() -> None:
    """A module's workload is recorded as 'python': made into a path it matched nothing, or a file of that name."""
    from dlperf.workload.loader import canonical_spec, split_canonical

    assert split_canonical("python") is None and canonical_spec("python") == "python"
    assert split_canonical("runs/model.onnx") is None


def test_a_workload_files_folder_goes_last_on_the_import_path(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """First on the path, a user's profile.py or logging.py beside the workload hid the module of that name that
    dlperf or torch imports later."""
    import os
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    load_workload(write(tmp_path, "wl.py", WORKLOAD_VARIABLE))
    stdlib = os.path.dirname(os.__file__)
    assert sys.path.index(str(tmp_path.resolve())) > sys.path.index(stdlib)


def test_private_names_and_imported_workload_functions_are_not_the_files_workloads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `_base` the workload is made from, or a factory imported from another module, made the file 'define several
    workloads' and asked the user to pick one of names that are not theirs."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "dlperf_test_shared_factory", raising=False)
    write(tmp_path, "dlperf_test_shared_factory.py", """
        import torch
        import dlperf

        def base(width: int = 4) -> dlperf.Workload:
            return dlperf.Workload(name=f"base{width}", make_model=lambda: torch.nn.Linear(width, 1),
                                   make_inputs=lambda b: (torch.zeros(b, width),))
    """)
    path = write(tmp_path, "wl.py", """
        import dataclasses
        from dlperf_test_shared_factory import base

        _plain = base(4)
        workload = dataclasses.replace(_plain, name="mine")
    """)
    w = load_workload(str(path))
    assert w.name == "mine" and w.source == f"{path}:workload"
    monkeypatch.delitem(sys.modules, "dlperf_test_shared_factory", raising=False)


def test_a_functions_file_loaded_by_a_relative_path_has_an_absolute_source_and_the_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without KIND or HIGHER_IS_BETTER a model() and inputs() file is 'generic' and its metric higher-is-better; its
    source is absolute, so that optimize's candidate processes rebuild it from any working directory."""
    write(tmp_path, "funcs.py", """
        import torch

        def model():
            return torch.nn.Linear(3, 1)

        def inputs(batch_size):
            return (torch.ones(batch_size, 3),)

        def evaluate(predict):
            return 1.0
    """)
    monkeypatch.chdir(tmp_path)
    w = load_workload("funcs.py")
    assert w.source == str(tmp_path / "funcs.py")
    assert w.kind == "generic"
    assert w.eval is not None and w.eval.metric_name == "metric" and w.eval.higher_is_better is True


def test_unbatched_example_inputs_are_refused_when_the_model_returns_as_many_outputs_as_the_taken_batch() -> None:
    """A sample of 2 features through a model returning a pair: the pair's length is no batch of rows."""

    class Pairs(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x.repeat(2), x.repeat(3)

    w = from_module(Pairs(), (torch.ones(2),))
    with pytest.raises(WorkloadError, match=r"its example inputs look unbatched"):
        w.check(w.build_model(), w.example_inputs(2))
