"""`dlperf load --seed/--max-steps` refused in argparse (exit 2, the flag named), and the --shape rule on models
`dlperf load` cannot reach in the integration tests (several inputs, none batched, one dimension)."""

from __future__ import annotations

import argparse

import pytest

from dlperf.cli.load import add_arguments
from dlperf.errors import ConfigError
from dlperf.loadgen.inputs import TensorInfo
from dlperf.loadgen.target import request_batch


@pytest.mark.parametrize(("args", "message"), [
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1; give a seed >= 0 for the random inputs"),
    (["--seed", "x"], "argument --seed: 'x' is not a whole number"),
    (["--max-steps", "0"], "argument --max-steps: must be >= 1, got 0; give how many rates --find-peak may try"),
    (["--max-steps", "-3"], "argument --max-steps: must be >= 1, got -3"),
])
def test_bad_values_are_argument_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="dlperf load")
    add_arguments(parser)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["127.0.0.1:8000", "--model", "m", *args])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_good_values_pass() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["127.0.0.1:8000", "--model", "m", "--seed", "0", "--max-steps", "1"])
    assert (args.seed, args.max_steps, args.batch_size) == (0, 1, None)


BATCHED = [TensorInfo("ids", "INT64", (-1, -1)), TensorInfo("mask", "INT64", (-1, -1))]
UNBATCHED = [TensorInfo("image", "FP32", (3, -1, -1))]


def test_the_batch_is_the_first_dimension_of_every_shape_of_a_batching_model() -> None:
    assert request_batch("m", BATCHED, {}, None) == 1
    assert request_batch("m", BATCHED, {}, 4) == 4
    assert request_batch("m", BATCHED, {"ids": (4, 128), "mask": (4, 128)}, None) == 4
    assert request_batch("m", BATCHED, {"ids": (4, 128)}, 4) == 4
    assert request_batch("m", [TensorInfo("x", "FP32", (-1,))], {"x": (8,)}, None) == 8
    assert request_batch("m", UNBATCHED, {"image": (3, 224, 224)}, None) == 1
    # a per-item input (metadata [-1, 1]): its batch size alone, or the full shape
    assert request_batch("m", PER_ITEM, {"scale": (3,)}, None) == 3
    assert request_batch("m", PER_ITEM, {"scale": (3, 1), "x": (3, 4)}, 3) == 3


PER_ITEM = [TensorInfo("x", "FP32", (-1, 4)), TensorInfo("scale", "FP32", (-1, 1))]


@pytest.mark.parametrize(("inputs", "shapes", "batch_size", "message"), [
    (BATCHED, {"ids": (4, 128), "mask": (2, 128)}, None,
     "--shape gives the inputs different batch dimensions (ids 4, mask 2)"),
    ([TensorInfo("x", "FP32", (-1,))], {"x": (8,)}, 2, "--shape x=8 sends batches of 8"),
    ([TensorInfo("x", "FP32", (-1,))], {"x": (8,)}, 2, "write --shape x=2, or drop --batch-size"),
    (UNBATCHED, {"image": (3, 224, 224)}, 4, "model 'm' has no batch dimension (its config's max_batch_size is 0, or "
                                             "its inputs' shapes do not all start with -1: image [3, -1, -1]), so "
                                             "each request holds one item: drop --batch-size 4"),
    (UNBATCHED, {"image": (224, 224)}, None, "give the full shape, e.g. --shape image=3,16,16"),
    (PER_ITEM, {"scale": (3,)}, 2, "--shape scale=3 sends batches of 3 (its first dimension is the batch dimension), "
                                   "--batch-size 2 asks for 2: write --shape scale=2, or drop --batch-size"),
    (PER_ITEM, {"scale": (3,), "x": (2, 4)}, None, "different batch dimensions (scale 3, x 2)"),
    (PER_ITEM, {"x": (3,)}, None, "input 'x' has 2 dimensions [-1, 4], the shape gives 1"),  # only [-1, 1] inputs
    # a fixed dimension given otherwise: the server's 400 (or, with --input-data, a fault of the data file)
    (UNBATCHED, {"image": (1, 224, 224)}, None, "--shape image=1,224,224: dimension 0 of input 'image' is fixed at 3"),
    ([TensorInfo("x", "FP32", (-1, 64))], {"x": (2, 32)}, None,
     "--shape x=2,32: dimension 1 of input 'x' is fixed at 64 (its shape [-1, 64]), the shape gives 32: --shape "
     "sets only its -1 dimensions, the batch dimension first"),
])
def test_contradictions_are_refused(inputs: list[TensorInfo], shapes: dict[str, tuple[int, ...]],
                                    batch_size: int | None, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        request_batch("m", inputs, shapes, batch_size)
    assert message in str(info.value)
