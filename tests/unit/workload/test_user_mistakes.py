"""What a user bringing their own model runs into: a workload derived from another one, example inputs computed with
autograd on, and the hints for inputs a model rejects (a list or dict, a float64 tensor, a keyword-only forward)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import WorkloadError
from dlperf.workload import Workload, from_module, load_workload

pytestmark = pytest.mark.unit

DERIVED = """
    import dataclasses
    import torch
    import dlperf

    def evaluate(predict):
        return float(torch.as_tensor(predict(torch.ones(4, 64))).abs().mean())

    def mine(scale: float = 1.0) -> dlperf.Workload:
        base = dlperf.load_workload("zoo:mlp")
        return dataclasses.replace(base, name=f"mine-{scale}",
                                   eval=dlperf.EvalSpec(evaluate=evaluate, metric_name="magnitude"))
"""


def test_a_workload_made_from_another_one_is_rebuilt_from_the_file(tmp_path: Path) -> None:
    """`dataclasses.replace(load_workload("zoo:mlp"), eval=...)` kept zoo:mlp's source, which optimize's candidate
    processes rebuild the workload from: they measured zoo:mlp, without the user's metric (fidelity stood in)."""
    path = tmp_path / "wl.py"
    path.write_text(textwrap.dedent(DERIVED) + "\nvalue = mine(2.0)\n")
    made = load_workload(f"{path}:mine?scale=0.5")
    assert made.source == f"{path}:mine?scale=0.5"
    rebuilt = load_workload(made.source)
    assert rebuilt.name == "mine-0.5" and rebuilt.eval is not None and rebuilt.eval.metric_name == "magnitude"
    value = load_workload(f"{path}:value")  # a module-level value made so
    assert value.source == f"{path}:value"
    assert load_workload(value.source).name == "mine-2.0"
    # a value a spec cannot carry leaves no source (optimize refuses it), not the zoo's
    assert load_workload(f"{path}:mine", scale=[1]).source == ""


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 3)
        self.b = nn.Linear(2, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.a(x) + self.b(y)}


def test_example_inputs_computed_with_autograd_on_are_measured() -> None:
    """An encoder's output (no graph leaf) could not be deep-copied: every call failed with "its inputs factory raised
    RuntimeError: Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol"."""
    encoder = nn.Linear(4, 6)
    x = encoder(torch.randn(3, 4))
    y = torch.randn(3, 2, requires_grad=True) * 2
    assert x.grad_fn is not None
    w = from_module(TwoInputs(), (x, {"y": y}))
    inputs = w.example_inputs(5)
    assert inputs[0].shape == (5, 6) and inputs[1]["y"].shape == (5, 2)
    assert not inputs[0].requires_grad
    assert torch.equal(inputs[0][:3], x.detach())
    assert x.grad_fn is not None and y.requires_grad  # the caller's tensors are left as they were
    result = dlperf.bench(TwoInputs(), (x, y), min_duration_s=0.01, min_iters=3, warmup_iters=1)
    assert [p.batch_size for p in result.points] == [3]


@pytest.mark.parametrize(("given", "fix"), [
    ("list", "the example inputs are a list, which is passed as ONE argument: give a tuple"),
    ("dict", "the example inputs are a dict, which is passed as ONE argument: give a tuple"),
])
def test_a_list_or_dict_of_example_inputs_is_named_as_the_user_gave_it(given: str, fix: str) -> None:
    """dlperf.bench(model, [x, y]) said "its inputs factory returned a list": the user wrote no inputs factory; a dict
    had no hint at all."""
    x, y = torch.randn(2, 6), torch.randn(2, 2)
    inputs = [x, y] if given == "list" else {"x": x, "y": y}
    w = from_module(TwoInputs(), inputs)
    with pytest.raises(WorkloadError) as info:
        w.check(w.build_model(), w.example_inputs(2))
    assert fix in str(info.value) and "inputs factory" not in str(info.value)
    factory = Workload(name="d", make_model=TwoInputs, make_inputs=lambda b: {"x": torch.ones(b, 6)})  # type: ignore[arg-type,return-value]
    with pytest.raises(WorkloadError, match="its inputs factory returned a dict, which is passed as ONE argument: "
                                            "return a tuple of the values"):
        factory.check(factory.build_model(), factory.example_inputs(2))


def test_float64_inputs_are_named_as_the_cause() -> None:
    """torch.from_numpy gives float64: torch only said 'mat1 and mat2 must have the same dtype'."""
    w = Workload(name="f64", make_model=lambda: nn.Linear(4, 2),
                 make_inputs=lambda b: (torch.randn(b, 4, dtype=torch.float64),))
    with pytest.raises(WorkloadError, match=r"input 0 is float64 but the model's weights are float32 .*make the "
                                            r"inputs float32, e.g. x.to\(torch.float32\)"):
        w.check(w.build_model(), w.example_inputs(2))
    conv = Workload(name="c64", make_model=lambda: nn.Conv2d(1, 2, 3),
                    make_inputs=lambda b: (torch.randn(b, 1, 5, 5, dtype=torch.float64),))
    with pytest.raises(WorkloadError, match="input 0 is float64 but the model's weights are float32"):
        conv.check(conv.build_model(), conv.example_inputs(2))


def test_another_error_with_a_float64_input_does_not_blame_the_dtype() -> None:
    w = Workload(name="shape", make_model=lambda: nn.Linear(4, 2),
                 make_inputs=lambda b: (torch.randn(b, 5, dtype=torch.float64),))
    model = w.build_model().double()
    with pytest.raises(WorkloadError) as info:
        w.check(model, w.example_inputs(2))
    assert "float64 but" not in str(info.value) and "shapes cannot be multiplied" in str(info.value)


class KeywordOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(4, 2)

    def forward(self, *, x: torch.Tensor) -> torch.Tensor:
        return self.l(x)


def test_a_keyword_only_forward_is_named_as_the_cause() -> None:
    w = Workload(name="kw", make_model=KeywordOnly, make_inputs=lambda b: (torch.ones(b, 4),))
    with pytest.raises(WorkloadError, match="forward takes x as keyword-only, and dlperf passes the inputs "
                                            r"positionally \(model\(\*inputs\)\)"):
        w.check(w.build_model(), w.example_inputs(2))


def test_a_functions_files_kind_is_checked_by_name(tmp_path: Path) -> None:
    """KIND = "CNN" came out as "Workload 'funcs': kind 'CNN' is unknown", naming neither the file nor KIND."""
    path = tmp_path / "funcs.py"
    path.write_text("import torch\nKIND = 'CNN'\ndef model():\n    return torch.nn.Linear(3, 1)\n"
                    "def inputs(batch_size):\n    return (torch.ones(batch_size, 3),)\n")
    with pytest.raises(WorkloadError, match=r"workload file '.*funcs\.py': `KIND` must be one of cnn, transformer, "
                                            r"mlp, generic, got 'CNN'"):
        load_workload(str(path))
    path.write_text(path.read_text().replace("'CNN'", "'cnn'"))
    assert load_workload(str(path)).kind == "cnn"


@pytest.mark.parametrize(("make", "layer", "fix"), [
    (lambda b: torch.randint(0, 9, (b, 4)), lambda: nn.Linear(4, 2),
     r"input 0 is int64 but the model computes in float32: make it float32, e.g. x.to\(torch.float32\) "
     r"\(torch.randint gives int64\)"),
    (lambda b: torch.randint(0, 255, (b, 3, 6, 6), dtype=torch.uint8), lambda: nn.Conv2d(3, 2, 3),
     r"input 0 is uint8 but the model computes in float32: make it float32 and scale it as in training, e.g. "
     r"x.to\(torch.float32\) / 255"),
])
def test_integer_inputs_to_a_float_model_are_named_as_the_cause(make: Callable[[int], torch.Tensor],
                                                                layer: Callable[[], nn.Module], fix: str) -> None:
    """uint8 images into a Conv2d: torch said 'Input type (unsigned char) and bias type (float) should be the same'."""
    w = Workload(name="ints", make_model=layer, make_inputs=lambda b: (make(b),))
    with pytest.raises(WorkloadError, match=fix):
        w.check(w.build_model(), w.example_inputs(2))


def test_token_ids_beside_a_wrong_float_input_blame_the_float_one() -> None:
    class Embedder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e = nn.Embedding(10, 4)
            self.l = nn.Linear(4, 4)

        def forward(self, ids: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return self.l(self.e(ids) * scale)

    w = Workload(name="emb", make_model=Embedder,
                 make_inputs=lambda b: (torch.zeros(b, 3, dtype=torch.long), torch.ones(b, 3, 1, dtype=torch.float64)))
    with pytest.raises(WorkloadError) as info:
        w.check(w.build_model(), w.example_inputs(2))
    assert "input 1 is float64 but the model's weights are float32" in str(info.value)
    assert "int64 but" not in str(info.value)


NOT_A_MODULE = """
    import torch

    def model():
        {body}

    def inputs(batch_size):
        return (torch.ones(batch_size, 4),)
"""


@pytest.mark.parametrize(("body", "said"), [
    ("return torch.nn.Linear(4, 2), 'tokenizer'",
     "returned a tuple of 2 (Linear, str), not a torch.nn.Module: return the model alone"),
    ("net = torch.nn.Linear(4, 2)", "returned None, not a torch.nn.Module: it builds the model but does not return it? "
                                    "end it with `return model`"),
    ("return lambda x: x * 2", "returned function, not a torch.nn.Module: wrap the function in an nn.Module whose "
                               "forward calls it"),
])
def test_a_model_factory_returning_no_module_says_what_to_return(tmp_path: Path, body: str, said: str) -> None:
    """It said "the model factory returned tuple, not a torch.nn.Module": neither which function nor the fix."""
    path = tmp_path / "wl.py"
    path.write_text(textwrap.dedent(NOT_A_MODULE).replace("{body}", body))
    w = load_workload(str(path))
    with pytest.raises(WorkloadError) as info:
        w.build_model()
    message = str(info.value)
    assert message.startswith(f"workload 'wl': the model factory {said}")
    assert f'File "{path}", line 4, in model' in message


class TwoKeywords(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e = nn.Embedding(10, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.e(input_ids) * attention_mask[..., None]


def test_a_tokenizers_mapping_is_resized_and_named_as_one_argument() -> None:
    """A tokenizer's BatchEncoding is a UserDict, not a dict: no batch was found in it, and every call failed with
    "its inputs for batch size 1 have no batch dimension of 1 (input 0: BatchEncoding): the inputs factory must
    return ...", of a factory the user never wrote."""
    from collections import UserDict

    encoded = UserDict({"input_ids": torch.zeros(2, 5, dtype=torch.long), "attention_mask": torch.ones(2, 5)})
    w = from_module(TwoKeywords(), encoded)
    assert w.default_batch_size == 2
    inputs = w.example_inputs(3)
    assert inputs[0]["input_ids"].shape == (3, 5)
    with pytest.raises(WorkloadError, match=r"the example inputs are a dict, which is passed as ONE argument: give a "
                                            r"tuple .*\(batch\['input_ids'\], batch\['attention_mask'\]\)"):
        w.check(w.build_model(), inputs)
    assert isinstance(encoded, UserDict) and encoded["input_ids"].shape == (2, 5)  # the caller's, as it was
    # as a tuple, as the hint says, it is measured
    result = dlperf.bench(TwoKeywords(), (encoded["input_ids"], encoded["attention_mask"]), min_duration_s=0.01,
                          min_iters=3, warmup_iters=1)
    assert [p.batch_size for p in result.points] == [2]


class Batched(Mapping[str, torch.Tensor]):
    """A mapping with a batch shape of its own, as tensordict's TensorDict has: dlperf resizes it as a tensor."""

    def __init__(self, data: dict[str, torch.Tensor]) -> None:
        self.data = data
        self.shape = torch.Size([len(next(iter(data.values())))])

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def test_a_mapping_with_a_shape_of_its_own_stays_what_it_is() -> None:
    """Only a mapping without a shape (a tokenizer's BatchEncoding) is made a dict: a TensorDict made one reached the
    model as a plain dict."""
    w = from_module(nn.Identity(), (Batched({"x": torch.ones(2, 3)}),))
    (given,) = w.example_inputs(2)
    assert type(given) is Batched and torch.equal(given["x"], torch.ones(2, 3))


def test_example_inputs_without_a_batched_tensor_say_so_of_the_example_inputs() -> None:
    class Texts(nn.Module):
        def forward(self, texts: list[str]) -> torch.Tensor:
            return torch.zeros(len(texts), 3)

    with pytest.raises(WorkloadError, match=r"its example inputs hold no tensor batched on dim 0 \(input 0: list of 2 "
                                            r"\(str, str\)\), so dlperf cannot make them any batch size") as info:
        dlperf.bench(Texts(), (["a", "b"],), min_duration_s=0.01)
    assert "inputs factory" not in str(info.value)


def test_input_names_must_name_every_input_once() -> None:
    """input_names=('x',) for a model of two inputs: dlperf serve's signature took one input, and every request then
    failed inside the model."""
    w = Workload(name="pair", make_model=TwoInputs, make_inputs=lambda b: (torch.ones(b, 6), torch.ones(b, 2)),
                 input_names=("x",))
    with pytest.raises(WorkloadError, match=r"workload 'pair': input_names names 1 input \(x\) but its inputs factory "
                                            r"returns 2 \(input 0: float32\[2, 6\], input 1: float32\[2, 2\]\): give "
                                            "one name per positional input, in order"):
        w.example_inputs(2)
    named = Workload(name="pair", make_model=TwoInputs, make_inputs=lambda b: (torch.ones(b, 6), torch.ones(b, 2)),
                     input_names=("x", "y"))
    assert len(named.example_inputs(2)) == 2
    with pytest.raises(WorkloadError, match=r"output_names names 'out' more than once: give each input or output its "
                                            "own name"):
        Workload(name="pair", make_model=TwoInputs, make_inputs=lambda b: (torch.ones(b, 6),),
                 output_names=("out", "out"))


def test_an_evaluate_on_another_device_gets_nested_inputs_there_and_keeps_its_data() -> None:
    """Only top-level tensors were moved to the device: a model taking a dict of tensors got them on the host in its
    evaluate (on a GPU: 'Expected all tensors to be on the same device'). 'meta' stands for the GPU here."""
    x, part = torch.ones(3, 2), torch.zeros(3, 1)
    data = {"x": x, "parts": [part]}
    seen: list[str] = []

    def predict(batch: dict[str, object], *, scale: torch.Tensor) -> dict[str, torch.Tensor]:
        x, parts = batch["x"], batch["parts"]
        assert isinstance(x, torch.Tensor) and isinstance(parts, list)
        seen.extend([x.device.type, parts[0].device.type, scale.device.type])
        return {"out": torch.full((3,), 2.0)}

    def evaluate(p: dlperf.workload.base.Predict) -> float:
        return float(p(data, scale=torch.ones(1))["out"].sum())

    w = Workload(name="d", make_model=lambda: nn.Identity(), make_inputs=lambda b: (torch.ones(b, 2),),
                 eval=dlperf.EvalSpec(evaluate=evaluate, metric_name="m"))
    assert w.score(predict, device="meta") == 6.0
    assert seen == ["meta", "meta", "meta"]
    assert data["x"] is x and data["parts"] == [part] and x.device.type == "cpu"  # the evaluate's data, as it was
