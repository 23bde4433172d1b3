"""A spec's option values are checked against the parameter's annotation (int, float, bool) before the factory runs."""

from __future__ import annotations

import pytest

from dlperf.errors import WorkloadError
from dlperf.workload.loader import load_workload

pytestmark = pytest.mark.unit

FACTORY = '''
from __future__ import annotations

import torch
import dlperf

def mynet(width: int = 16, drop: float = 0.1, bias: bool = True, depth: int | None = None,
          name: str = "net", raw=3, tag="t", anything=None) -> dlperf.Workload:
    def make_model():
        return torch.nn.Linear(8, width, bias=bias)  # 'abc' here raised "not all arguments converted ..."
    return dlperf.Workload(name=f"{name}-{width}-{drop}-{bias}-{depth}-{raw}", make_model=make_model,
                           make_inputs=lambda b: (torch.zeros(b, 8),))
'''


@pytest.fixture()
def workload_file(tmp_path):
    path = tmp_path / "wl.py"
    path.write_text(FACTORY)
    return path


@pytest.mark.parametrize(("option", "expected"), [
    ("width=abc", "option width=abc is not a whole number (the parameter is annotated `width: int`): give e.g. "
                  "?width=16"),
    ("width=2.5", "option width=2.5 is not a whole number"),
    ("width=true", "option width=true is not a whole number"),
    ("drop=high", "option drop=high is not a number (the parameter is annotated `drop: float`): give e.g. ?drop=0.1"),
    ("bias=1", "option bias=1 is not true or false (the parameter is annotated `bias: bool`): give e.g. ?bias=true"),
    ("raw=x", "option raw=x is not a whole number (the parameter's default is 3): give e.g. ?raw=3"),
    ("depth=deep", "option depth=deep is not a whole number (the parameter is annotated `depth: int`): give e.g. "
                   "?depth=8"),
])
def test_a_value_that_does_not_fit_its_annotation_is_named(workload_file, option, expected):
    with pytest.raises(WorkloadError) as info:
        load_workload(f"{workload_file}:mynet?{option}")
    assert f"workload '{workload_file}:mynet' " in str(info.value)
    assert expected in str(info.value)


def test_values_that_fit_are_passed_as_before(workload_file):
    workload = load_workload(f"{workload_file}:mynet?width=4&drop=1&bias=false&depth=3&name=7&raw=5&tag=1&anything=z")
    assert workload.name == "7-4-1-False-3-5"  # an int for a float, a str as written
    assert workload.build_model().out_features == 4


def test_the_check_applies_when_the_file_holds_one_workload_and_to_options_outside_the_spec(workload_file):
    with pytest.raises(WorkloadError, match="option width=wide is not a whole number"):
        load_workload(f"{workload_file}?width=wide")
    with pytest.raises(WorkloadError, match="option width=wide is not a whole number"):
        load_workload(str(workload_file), option_texts={"width": "wide"})  # dlperf ab's option.width=wide


def test_python_keyword_options_are_not_reread(workload_file):
    """Options given from Python are values, not text: they go to the function as given."""
    workload = load_workload(str(workload_file), width=5, drop=0.25)
    assert workload.name.startswith("net-5-0.25-")


def test_an_optional_annotation_left_as_text_is_still_checked(tmp_path):
    """An annotation that cannot be evaluated (a type imported under TYPE_CHECKING only) leaves every annotation of
    the function as text: `Optional[int]` read so took '?width=abc' to the factory as the text 'abc'."""
    path = tmp_path / "typed.py"
    path.write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING, Optional\n"
        "import torch\n"
        "import dlperf\n"
        "if TYPE_CHECKING:\n"
        "    from torch import Tensor\n"
        "def make(width: Optional[int] = None, init: Tensor | None = None) -> dlperf.Workload:\n"
        "    return dlperf.Workload(name=f'w{width}', make_model=lambda: torch.nn.Linear(4, 1),\n"
        "                           make_inputs=lambda b: (torch.zeros(b, 4),))\n"
    )
    with pytest.raises(WorkloadError, match=r"option width=abc is not a whole number \(the parameter is annotated "
                                            r"`width: int`\)"):
        load_workload(f"{path}?width=abc")
    assert load_workload(f"{path}?width=3").name == "w3"
