"""Resolve what the user points at (`zoo:NAME`, `file.py`, `file.py:name`, an nn.Module) to a Workload."""

from __future__ import annotations

import contextlib
import copy
import difflib
import hashlib
import importlib.util
import inspect
import keyword
import math
import os
import re
import sys
import typing
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType, UnionType
from typing import Any, NoReturn, Union

from dlperf.errors import WorkloadError
from dlperf.workload.base import Workload, _batch_of, _describe_value, _user_frame


def load_workload(spec: Any, example_inputs: Any = None, *, option_texts: Mapping[str, str] | None = None,
                  **options: Any) -> Workload:
    """Return the Workload for `spec`.

    `spec` is a Workload, an `nn.Module` (then `example_inputs` is required and is resized to every batch
    size), `'zoo:NAME'` (options such as `zoo:minilm?seq_len=64` or keyword `options`), a path `'file.py'`
    (or a pathlib.Path) holding one workload, or `'file.py:name'` (a function's options as
    `'file.py:name?width=8'` or keyword `options`). `option_texts` are options as a user typed them outside the
    spec (`dlperf ab`'s option.NAME=VALUE): each is read as the spec's ?NAME=VALUE would be, by the parameter it
    is for (`_spec_options`: 'nan' stays the text for a parameter annotated `str`), and wins over the spec's.
    """
    texts = dict(option_texts or {})
    if isinstance(spec, os.PathLike):  # a pathlib.Path to the file
        spec = os.fspath(spec)
    if isinstance(spec, (Workload, str)) and example_inputs is not None:  # they would be ignored
        what = f"workload '{spec.name}'" if isinstance(spec, Workload) else f"'{spec}'"
        raise WorkloadError(f"{what} makes its own inputs: example inputs are for an nn.Module only, "
                            "e.g. dlperf.bench(model, (x,))")
    if isinstance(spec, Workload):
        if options or texts:
            raise WorkloadError(f"workload '{spec.name}' is a dlperf.Workload already: it takes no options "
                                f"({', '.join({**texts, **options})})")
        return spec
    if isinstance(spec, str):
        if spec.startswith("zoo:"):
            from dlperf.workload import zoo

            name, written = _split_options(spec[len("zoo:") :])
            # read as a file function's options are: by the parameter ('?attn=1' is the text for minilm's attn: str)
            return zoo.get(name, **{**_spec_options(zoo.factory(name), {**written, **texts}), **options})
        return as_rebuilt(_load_from_file(spec, texts, **options))
    try:
        from torch import nn
    except ImportError as exc:  # pragma: no cover - torch is a hard dependency
        raise WorkloadError("torch is not installed") from exc
    if isinstance(spec, nn.Module):
        if example_inputs is None:
            raise WorkloadError(
                "an nn.Module was given without example inputs: pass them, e.g. dlperf.bench(model, (x,))"
            )
        if options or texts:
            raise WorkloadError(f"an nn.Module takes no options ({', '.join({**texts, **options})}): options are "
                                "for zoo and file workloads")
        return from_module(spec, example_inputs)
    raise WorkloadError(
        f"cannot make a workload from {type(spec).__name__}: give 'zoo:NAME', 'file.py[:name]', "
        "a dlperf.Workload, or an nn.Module with example inputs"
    )


_REBUILT: weakref.WeakValueDictionary[int, Workload] = weakref.WeakValueDictionary()
"""The Workload objects built from their `source` (a file or zoo spec), by id: what a candidate process rebuilds
from that source is one of these, and not a `dataclasses.replace` of one (another metric, other inputs)."""


def as_rebuilt(workload: Workload) -> Workload:
    """`workload`, noted as what its `source` builds (`is_rebuilt`)."""
    _REBUILT[id(workload)] = workload
    return workload


def is_rebuilt(workload: Workload) -> bool:
    """Whether `workload` is an object its `source` built, so that another process rebuilding it from the source
    gets the same workload."""
    return _REBUILT.get(id(workload)) is workload


def from_module(model: Any, example_inputs: Any, name: str | None = None) -> Workload:
    """A Workload around an existing module; its inputs are the given example inputs at any batch size.

    The batch is the first dimension of the first tensor found, also inside lists and dicts (a model taking a
    list or a dict of tensors); every tensor with that many rows is repeated or cut to the batch size asked for.
    The first call (`Workload.check`) refuses inputs that look unbatched: no output has that many rows (a sample
    of shape [8] through Linear(8, 2) gives [2]).

    Each build is a deep copy of `model` as it is then, as a workload's factory builds a fresh model: measuring
    puts a model in eval mode, passes change it in place (pruning, fusion), and none of that may reach the
    caller's model. The copy costs the model's memory once more while it is in use.
    """
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    label = name or type(model).__name__
    where = _array_in(inputs)
    if where is not None:  # resizing it to a batch size failed inside dlperf ("its inputs factory raised ...")
        raise WorkloadError(f"example input {where} of '{label}' is a numpy array: give torch tensors, e.g. "
                            "torch.from_numpy(x)")
    # detached: a tensor computed with autograd on (an encoder's output, `x * w` for a w that requires grad) is no
    # graph leaf, and deepcopy refuses one ("Only Tensors created explicitly by the user (graph leaves) support the
    # deepcopy protocol"), which failed every call as "its inputs factory raised RuntimeError"
    inputs = _detached(inputs)
    # a Mapping that is no dict (transformers' BatchEncoding, a UserDict) as a plain dict, which dlperf looks into for
    # the batch and resizes: left as it was, no batch was found, and every call failed as "its inputs for batch size 1
    # have no batch dimension of 1 (input 0: BatchEncoding)"
    # (not one with a shape of its own, a TensorDict: dlperf resizes that as it does a tensor)
    inputs = tuple(dict(v) if isinstance(v, Mapping) and not isinstance(v, dict) and not hasattr(v, "shape") else v
                   for v in inputs)
    batch = _batch_of(inputs)

    def make_model() -> Any:
        try:
            return copy.deepcopy(model)
        except Exception as exc:
            raise WorkloadError(
                f"model '{label}' cannot be copied ({type(exc).__name__}: {exc}); dlperf runs a copy so that "
                "measuring and optimizing never change your model: give a dlperf.Workload whose make_model builds "
                "a fresh one"
            ) from exc

    def make_inputs(batch_size: int) -> tuple[Any, ...]:
        # a copy: a model working in place changed the caller's tensors (a smaller batch is a view of them)
        if batch is None or batch_size == batch:
            return copy.deepcopy(inputs)
        return copy.deepcopy(tuple(_resize(v, batch, batch_size) for v in inputs))

    return Workload(
        name=label,
        make_model=make_model,
        make_inputs=make_inputs,
        source="python",
        default_batch_size=batch or 1,
        _batch_from_inputs=True,
    )


def _detached(value: Any) -> Any:
    """`value` with every tensor detached from autograd (its data shared), inside new tuples, lists and dicts: the
    caller's containers stay as they are."""
    detach = getattr(value, "detach", None)
    if getattr(value, "shape", None) is not None and callable(detach) and getattr(value, "requires_grad", False):
        return detach()
    if isinstance(value, dict):
        out = copy.copy(value)  # a dict subclass keeps its type
        for k in list(out):
            out[k] = _detached(out[k])
        return out
    if isinstance(value, list):
        return [_detached(v) for v in value]
    if isinstance(value, tuple):
        items = [_detached(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a namedtuple takes fields
    return value


def _array_in(value: Any, where: str = "") -> str | None:
    """Where the first numpy array in `value` is ('0', '1[2]', "0['ids']"), looking inside tuples, lists and dicts."""
    if type(value).__module__ == "numpy" and hasattr(value, "shape"):
        return where or "0"
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = ((f"[{k!r}]", v) for k, v in value.items())
    elif isinstance(value, (tuple, list)):
        items = ((f"[{i}]" if where else str(i), v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        found = _array_in(item, where + key)
        if found is not None:
            return found
    return None


def _resize(value: Any, batch: int, batch_size: int) -> Any:
    """`value` with every tensor of `batch` rows repeated or cut to `batch_size` rows (inside tuples, lists, dicts)."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        if len(shape) == 0 or shape[0] != batch:  # not batched: a scalar, a mask shared by every row
            return value
        reps = -(-batch_size // batch)
        return value.repeat(reps, *([1] * (len(shape) - 1)))[:batch_size].contiguous()
    if isinstance(value, dict):
        return {k: _resize(v, batch, batch_size) for k, v in value.items()}
    if isinstance(value, list):
        return [_resize(v, batch, batch_size) for v in value]
    if isinstance(value, tuple):
        items = [_resize(v, batch, batch_size) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a namedtuple takes fields
    return value


def _split_options(text: str) -> tuple[str, dict[str, str]]:
    """('NAME', {key: value as written}) of 'NAME?key=value&...': what a value means depends on the parameter it is
    for (`_spec_options`)."""
    if "?" not in text:
        return text, {}
    name, query = text.split("?", 1)
    return name, _parse_query(query, text)


def _parse_query(query: str, text: str) -> dict[str, str]:
    """{key: value as written} of 'key=value&...', the query of the spec `text` (named in the errors)."""
    options: dict[str, str] = {}
    for part in query.split("&"):
        if not part:
            continue
        if "=" not in part:
            raise WorkloadError(f"option '{part}' in '{text}' has no value: write key=value")
        key, value = part.split("=", 1)
        if not key:
            raise WorkloadError(f"option '{part}' in '{text}' has no name: write key=value")
        if key in options:
            raise WorkloadError(f"option '{key}' is given twice in '{text}': give it once")
        options[key] = value
    return options


def check_option_names(function: Callable[..., Any], options: dict[str, Any], what: str) -> None:
    """WorkloadError when `function` takes no keyword named like one of `options` (naming the closest one taken, and
    all of them), or needs one that is not given: a TypeError from the call would name none of them."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): the call itself will say
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    named = [p for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                 inspect.Parameter.KEYWORD_ONLY)]
    taken = [p.name for p in named]
    for key in options:
        if key not in taken:
            close = difflib.get_close_matches(key, taken, n=1)
            guess = f"did you mean '{close[0]}'? " if close else ""
            listed = f"its options are {', '.join(taken)}" if taken else "it takes none"
            raise WorkloadError(f"{what} has no option '{key}': {guess}{listed}")
    missing = [p.name for p in named if p.default is inspect.Parameter.empty and p.name not in options]
    if missing:
        raise WorkloadError(f"{what} needs the option{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
                            f"which {'have' if len(missing) > 1 else 'has'} no default: give "
                            f"{'them' if len(missing) > 1 else 'it'} as ?{'&'.join(f'{m}=VALUE' for m in missing)}")


def canonical_spec(spec: str) -> str:
    """`spec` as it names the same workload from any folder, without importing anything: a file spec with its path
    made absolute and its options sorted ('wl.py' typed in /p and 'p/wl.py' typed in / are one workload; two
    'wl.py' in two folders are two); a zoo spec, or one that does not parse, as given."""
    parts = split_canonical(spec)
    if parts is None:  # a zoo spec, or not a file spec ('python', an in-memory module's): no path to make of it
        return spec
    path, attr, options = parts
    text = _absolute(Path(path)) + (f":{attr}" if attr else "")
    return text + ("?" + "&".join(f"{k}={options[k]}" for k in sorted(options)) if options else "")


def split_canonical(spec: str) -> tuple[str, str, dict[str, Any]] | None:
    """(path, attribute, options) of a file workload's spec (absolute in a `canonical_spec`); None for a zoo spec or
    one that is no file spec. The options' values are for comparing two specs (`_matchable`)."""
    if spec.startswith("zoo:") or not spec:
        return None
    try:
        path, attr, texts = _split_file_spec(spec)
    except WorkloadError:
        return None
    return (path, attr, {k: _matchable(v) for k, v in texts.items()}) if path.endswith(".py") else None


def _matchable(text: str) -> Any:
    """An option's value as two specs are compared: parsed, so that '?x=1.50' typed matches the '?x=1.5' that a
    profile recorded, and a NaN as the text 'nan', which equals itself: a float NaN equals nothing, so a spec with
    '?x=nan' matched no record of its own runs, not even one written the same way."""
    value = parse_option_value(text)
    return "nan" if _is_nan(value) else value


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def code_fingerprint(source: str) -> str:
    """What a resumed search must find unchanged of a workload's code: for a file workload, a hash of its file and of
    every module imported so far from its folder or below (a model defined beside it), leaving out installed
    packages; for a built-in one, dlperf's version. Data the code reads (a checkpoint) is not covered."""
    if source.startswith("zoo:") or not source:
        from dlperf import __version__

        return f"dlperf {__version__}"
    path = os.path.abspath(_split_file_spec(source)[0])
    folder = os.path.dirname(path) + os.sep
    installed = tuple({os.path.join(p, "") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    files = {path}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not file.endswith(".py"):
            continue
        file = os.path.abspath(file)
        if file.startswith(folder) and not file.startswith(installed) and not {"site-packages", "dist-packages"} & set(
                Path(file).parts):
            files.add(file)
    digest = hashlib.sha256()
    for file in sorted(files):
        digest.update(os.path.relpath(file, folder).encode() + b"\0")
        try:
            digest.update(Path(file).read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()[:16]


def parse_option_value(value: str) -> Any:
    """A workload option's text as the factory gets it: true/false as a bool, then int, then float, else the text
    (`?hidden=512` in a spec, `option.hidden=512` in `dlperf ab`'s settings). A file workload's parameter that
    takes a string gets the text as written instead (`_spec_options`)."""
    if value.lower() in ("true", "false"):  # else '?pretrained=false' passed the string "false", which is true
        return value.lower() == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def _spec_options(function: Any, texts: dict[str, str]) -> dict[str, Any]:
    """A spec's options, as written, as `function` gets them: the text itself for a parameter that takes a string
    (`_string_parameters`: '?metric=nan' is the string 'nan', not a float NaN), else `parse_option_value`'s."""
    strings = _string_parameters(function)
    return {k: v if k in strings else parse_option_value(v) for k, v in texts.items()}


def _string_parameters(function: Any) -> set[str]:
    """The parameters of `function` annotated `str` (or `str | None`), or unannotated with a string default. String
    annotations (`from __future__ import annotations`) are evaluated where they can be, else read as text; one that
    cannot be read counts as no annotation, never as an error."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return set()
    with contextlib.suppress(Exception):  # NameError for a name imported under TYPE_CHECKING only, or whatever
        signature = inspect.signature(function, eval_str=True)  # an annotation's code raises: the text is read then
    return {p.name for p in signature.parameters.values() if _takes_string(p.annotation, p.default)}


_SCALAR_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool}


def _check_option_types(function: Any, values: Mapping[str, Any], texts: Mapping[str, str], what: str) -> None:
    """WorkloadError when a value typed in a spec does not read as the type its parameter is annotated with
    (`int`, `float`, `bool`, or one of them `| None`): `?width=abc` for `width: int` reached the factory as the text
    'abc', and the user read "TypeError: not all arguments converted during string formatting" from inside torch
    (`?width=2.5`: "out_channels must be divisible by groups")."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    with contextlib.suppress(Exception):  # as `_string_parameters`: an annotation that cannot be evaluated stays text
        signature = inspect.signature(function, eval_str=True)
    for name, value in values.items():
        parameter = signature.parameters.get(name)
        if parameter is None or name not in texts:
            continue
        annotated = parameter.annotation is not inspect.Parameter.empty
        # unannotated, the default's type says it, as a string default makes a string parameter (`_takes_string`)
        wanted = (_scalar_annotation(parameter.annotation) if annotated
                  else type(parameter.default) if type(parameter.default) in (int, float, bool) else None)
        if wanted is None or _reads_as(value, wanted):
            continue
        example = parameter.default if _reads_as(parameter.default, wanted) else {int: 8, float: 0.5, bool: True}[
            wanted]
        words = {int: "a whole number", float: "a number", bool: "true or false"}[wanted]
        shown = str(example).lower() if wanted is bool else example
        why = (f"the parameter is annotated `{name}: {wanted.__name__}`" if annotated
               else f"the parameter's default is {shown}")
        raise WorkloadError(f"{what} option {name}={texts[name]} is not {words} ({why}): give e.g. ?{name}={shown}")


def _scalar_annotation(annotation: Any) -> type | None:
    """int, float or bool when `annotation` is one of them (or it `| None`, or its text); else None."""
    if isinstance(annotation, str):  # left as text: not evaluable
        text = "".join(annotation.split()).replace("builtins.", "").replace("typing.", "")
        for found in (text, text.removesuffix("|None"), text.removeprefix("None|"),
                      text[len("Optional["):-1] if text.startswith("Optional[") and text.endswith("]") else ""):
            if found in _SCALAR_TYPES:
                return _SCALAR_TYPES[found]
        return None
    if annotation in (int, float, bool):
        return annotation
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (Union, UnionType) and len(args) == 2 and type(None) in args:
        other = args[0] if args[1] is type(None) else args[1]
        return other if other in (int, float, bool) else None
    return None


def _reads_as(value: Any, wanted: type) -> bool:
    """`value` (as `parse_option_value` read it) is fit for a parameter of type `wanted` (an int for a float too)."""
    if isinstance(value, bool) or wanted is bool:
        return isinstance(value, bool) and wanted is bool
    return isinstance(value, int) if wanted is int else isinstance(value, (int, float))


_STRING_ANNOTATIONS = {"str", "builtins.str", "str|None", "None|str", "Optional[str]", "typing.Optional[str]"}


def _takes_string(annotation: Any, default: Any) -> bool:
    if annotation is inspect.Parameter.empty:
        return isinstance(default, str)
    if isinstance(annotation, str):  # left as text: not evaluable
        return "".join(annotation.split()) in _STRING_ANNOTATIONS
    if annotation is str:
        return True
    args = typing.get_args(annotation)  # Optional[str], str | None
    return typing.get_origin(annotation) in (Union, UnionType) and len(args) == 2 and str in args \
        and type(None) in args


def _query(options: dict[str, Any], strings: Collection[str] = ()) -> str | None:
    """'?key=value&...' that _split_options and `_spec_options` read back as `options` ('' for none), the keys in
    `strings` being string parameters; None when a value would not come back the same (a list, None, a string that
    reads as a number or a bool for a parameter that does not take a string, or holds '&')."""
    parts = []
    for key, value in options.items():
        text = str(value)
        back = text if key in strings else parse_option_value(text)
        same = back == value or (_is_nan(back) and _is_nan(value))  # '?scale=nan' left no source: nan != nan
        if type(back) is not type(value) or not same or "&" in text or "&" in key or "=" in key:
            return None
        parts.append(f"{key}={text}")
    return "?" + "&".join(parts) if parts else ""


def _canonical(function: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    """`options` in the order of `function`'s parameters, less those equal to their default (as the zoo names
    only non-default options): one workload, one source, whichever way its options were written."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return options
    order = [k for k in parameters if k in options] + [k for k in options if k not in parameters]
    return {k: options[k] for k in order
            if k not in parameters or not _same(options[k], parameters[k].default)}


def _same(value: Any, default: Any) -> bool:
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:  # an array-like default compares element-wise
        return False


def _load_from_file(spec: str, extra_texts: dict[str, str], **keywords: Any) -> Workload:
    path_text, attr, texts = _split_file_spec(spec)
    texts = {**texts, **extra_texts}
    options = {**texts, **keywords}  # the names given; what a spec's value means depends on the function's parameter

    def given(target: Any, attr: str) -> dict[str, Any]:
        if not callable(target):
            return {**texts, **keywords}
        values = _spec_options(target, texts)
        _check_option_types(target, {k: v for k, v in values.items() if k not in keywords}, texts,
                            f"workload '{path}:{attr}'")
        return {**values, **keywords}

    path = Path(path_text)
    if not path.exists():
        from dlperf.workload import zoo

        hint = " (built-in workloads are named zoo:NAME; `dlperf zoo` lists them)" if "/" not in spec else ""
        if path_text in zoo.ZOO:
            hint = f": did you mean zoo:{spec}? (`dlperf zoo` lists the built-in workloads)"
        raise WorkloadError(f"workload file '{path}' does not exist{hint}")
    if path.is_dir():
        if (path / "manifest.json").is_file():  # was "is a folder, not a file": true, and no help with an artifact
            raise WorkloadError(
                f"'{path}' is an artifact folder (its manifest.json, written by dlperf optimize), not a workload: "
                f"`dlperf bench {spec}` measures it, `dlperf serve {spec}` serves it; give this command the workload "
                "it was made from (the manifest's 'workload')")
        if (path / "artifact" / "manifest.json").is_file():
            # a candidate's folder under the "candidates' artifacts: DIR" that optimize prints: it read "point at a
            # .py file", with no word of the artifact one level down
            raise WorkloadError(
                f"'{path}' is a candidate's folder of a dlperf optimize search, not a workload: its artifact is "
                f"'{path / 'artifact'}' (`dlperf bench {path / 'artifact'}` measures it)")
        if any(path.glob("*/artifact/manifest.json")):
            raise WorkloadError(
                f"'{path}' is the work folder of a dlperf optimize search, not a workload: each candidate's artifact "
                f"is in {path}/KEY/artifact (`dlperf runs show` of a candidate run names its own), which `dlperf "
                "bench` measures")
        raise WorkloadError(f"workload file '{path}' is a folder, not a file: point at a .py file")
    if path.suffix != ".py":
        raise WorkloadError(f"workload file '{path}' is not a Python file: point at a .py file")
    module = _import_file(path)
    functions = not _candidates(module) and hasattr(module, "model") and hasattr(module, "inputs")
    if attr:
        if not hasattr(module, attr):
            listed = ", ".join(_candidates(module)) or "none"
            hint = f"; it defines model() and inputs(): pass {path} alone" if functions else ""
            raise WorkloadError(
                f"workload file '{path}' defines no '{attr}' (workloads found there: {listed}){hint}"
            )
        if functions and attr in ("model", "inputs"):  # `model` returns a module, never a Workload
            raise WorkloadError(f"workload file '{path}' defines model() and inputs(), which make one workload: "
                                f"pass {path} alone, not {path}:{attr}")
        return _to_workload(getattr(module, attr), path, attr, **given(getattr(module, attr), attr))
    found = _candidates(module)
    if len(found) == 1:
        return _to_workload(getattr(module, found[0]), path, found[0], **given(getattr(module, found[0]), found[0]))
    if len(found) > 1:
        raise WorkloadError(
            f"workload file '{path}' defines several workloads ({', '.join(found)}): "
            f"pick one as {path}:NAME"
        )
    if hasattr(module, "model") and hasattr(module, "inputs"):
        if options:
            raise WorkloadError(f"workload file '{path}' defines model() and inputs(), which take no options "
                                f"({', '.join(options)}): write a function returning a dlperf.Workload for options")
        return _from_functions(module, path)
    # half of the functions form ('model' and 'make_inputs'): name the one that is missing
    half = next((f" (it defines {have}() but no {lack}())" for have, lack in (("model", "inputs"), ("inputs", "model"))
                 if callable(getattr(module, have, None)) and not hasattr(module, lack)), "")
    if callable(getattr(module, "make_model", None)) and callable(getattr(module, "make_inputs", None)):
        # the Workload's field names as functions of the file (a first guess from the docs' tables): say the one step
        raise WorkloadError(
            f"workload file '{path}' defines make_model() and make_inputs(), the fields of dlperf.Workload, but no "
            f"workload: add `workload = dlperf.Workload(name=\"{path.stem}\", make_model=make_model, "
            "make_inputs=make_inputs)`, or rename them model() and inputs(batch_size)")
    raise WorkloadError(
        f"workload file '{path}' defines no workload{half}: define `workload = dlperf.Workload(...)`, or "
        f"functions `model()` and `inputs(batch_size)`, or pass {path}:NAME"
    )


_FILE_SPEC = re.compile(r"(?P<path>.*?\.py)(?::(?P<attr>[^/\\:?]+))?(?:\?(?P<query>.*))?", re.DOTALL)
"""'file.py[:NAME][?key=value&...]', the path ending at the first '.py' that the name, the options or the end
follows."""


def _split_file_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """(path, attribute, options as written) of 'file.py[:NAME][?key=value&...]'. The name follows the file's name
    and holds no path separator, so a folder or a Windows drive with a colon in it ('runs:v2/wl.py',
    'C:\\wl.py:small') stays in the path; so does a '?' in a folder's name, and the options, which follow the file's
    name, may hold a path ('?ckpt=runs/best.pt'). A spec naming no .py file is split after its last path separator."""
    if Path(spec).exists():
        return spec, "", {}
    match = _FILE_SPEC.fullmatch(spec)
    if match is not None:  # the options may hold a '/' (a checkpoint's path): not split at the last separator
        path = match["path"]
        named = spec[max(path.rfind("/"), path.rfind("\\")) + 1:]  # the file's name on, as the errors name it
        return path, match["attr"] or "", {} if match["query"] is None else _parse_query(match["query"], named)
    start = max(spec.rfind("/"), spec.rfind("\\")) + 1
    folder, (rest, options) = spec[:start], _split_options(spec[start:])
    rest = folder + rest
    head, sep, tail = rest.rpartition(":")
    if not sep or not head or "/" in tail or "\\" in tail:
        return rest, "", options
    return head, tail, options


class _ArgparseExit(SystemExit):
    """argparse's error exit in a workload file being imported, with its message (`_argparse_errors_raised`)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


@contextlib.contextmanager
def _argparse_errors_raised() -> Iterator[None]:
    """While a workload file is imported, an argparse error raises `_ArgparseExit` instead of printing its usage
    line: "dlperf: error: the following arguments are required: --data" read as dlperf's own usage error."""
    import argparse

    def error(self: argparse.ArgumentParser, message: str) -> NoReturn:
        raise _ArgparseExit(message)

    original = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = error  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = original  # type: ignore[method-assign]


def _import_file(path: Path) -> ModuleType:
    # The file's folder is importable, as for `python file.py`: a workload file importing its model from a module
    # beside it ('from mynet import MyNet') failed with ModuleNotFoundError from any working directory. Last on the
    # path, so that a user's profile.py or logging.py never hides the module dlperf or torch imports; and it stays
    # there: factories may import lazily, when dlperf calls them.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    mod_name = _module_name(path)
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    if module_spec is None or module_spec.loader is None:
        raise WorkloadError(f"workload file '{path}' cannot be imported")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    try:
        with _argparse_errors_raised():
            module_spec.loader.exec_module(module)
    except SystemExit as exc:  # argparse's parse_args() reading dlperf's own arguments, a sys.exit()
        sys.modules.pop(mod_name, None)
        said = f", argparse: {exc.message}" if isinstance(exc, _ArgparseExit) else ""
        raise WorkloadError(
            f"workload file '{path}' exited while importing (SystemExit: {exc.code}{said}): dlperf imports the file, "
            "it does not run it; put command-line parsing and sys.exit() under `if __name__ == \"__main__\":`\n"
            f"{_user_frame(exc)}"
        ) from exc
    except Exception as exc:
        sys.modules.pop(mod_name, None)
        raise WorkloadError(
            f"workload file '{path}' raised {type(exc).__name__} while importing: {exc}{_import_hint(exc, path)}\n"
            f"{_user_frame(exc)}"
        ) from exc
    return module


def _import_hint(exc: BaseException, path: Path) -> str:
    """How to make a workload file that is part of a package import its siblings: dlperf imports it as a top-level
    module (as `python file.py` runs it), so `from .net import Net` has no package, and `from proj.net import Net`
    needs the folder above `proj` on the path, which a console script does not put there (`python -m` would)."""
    if not isinstance(exc, ImportError):
        return ""
    folder = path.resolve().parent
    if "relative import" in str(exc):
        return (f": dlperf imports the file as a top-level module, as `python {path}` runs it, so relative imports "
                f"have no package: import the module beside it by its name ('{folder}' is on the path), or import "
                "absolutely from your package with the folder above it on PYTHONPATH")
    top = (exc.name or "").split(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
    above = next((p for p in folder.parents if (p / top / "__init__.py").is_file()), None) if top else None
    if folder.name == top:
        above = folder.parent
    if above is None:
        return ""
    return (f": '{top}' is a folder in '{above}', which is not on the import path (a console script does not add the "
            f"working directory): run with PYTHONPATH={above}, or install your project (pip install -e .)")


def _module_name(path: Path) -> str:
    """The file's own name when `import NAME` finds this very file, so that a process started with spawn or
    forkserver (DataLoader workers on macOS, and on Linux from Python 3.14) can unpickle the classes it defines: a
    Dataset of a private module name killed every loader worker. Else (a name taken by another module) a private
    name, the same in every process."""
    stem = path.stem
    if stem.isidentifier() and not keyword.iskeyword(stem):
        try:
            found = importlib.util.find_spec(stem)
        except (ImportError, ValueError):
            found = None
        if found is not None and found.origin and Path(found.origin).resolve() == path.resolve():
            return stem
    return "dlperf_user_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]


def _candidates(module: ModuleType) -> list[str]:
    """Names in the module that are Workloads or functions annotated to return one."""
    names = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if isinstance(value, Workload):
            names.append(name)
        elif inspect.isfunction(value) and value.__module__ == module.__name__:
            ret = inspect.signature(value).return_annotation
            if ret is Workload or (isinstance(ret, str) and ret.split(".")[-1] == "Workload"):
                names.append(name)
    return names


def _to_workload(value: Any, path: Path, attr: str, **options: Any) -> Workload:
    if isinstance(value, Workload):
        if options:
            raise WorkloadError(f"'{path}:{attr}' is a dlperf.Workload value, which takes no options "
                                f"({', '.join(options)}): write a function returning one for options")
        # always the file's spec, even over a source the value carries: one made from another workload
        # (`dataclasses.replace(load_workload("zoo:mlp"), eval=...)`) kept that one's, and optimize's candidate
        # processes rebuilt zoo:mlp, without the user's metric; importing the file rebuilds this very value
        return _with_source(value, f"{_absolute(path)}:{attr}")
    if callable(value):
        check_option_names(value, options, f"workload '{path}:{attr}'")
        try:
            result = value(**options)
        except Exception as exc:
            raise WorkloadError(
                f"workload '{path}:{attr}' raised {type(exc).__name__}: {exc}\n{_user_frame(exc, value)}"
            ) from exc
        if isinstance(result, Workload):
            # the options go into the source, so that a candidate process rebuilds this workload, not the
            # defaults; a value that a spec string cannot carry leaves no source (optimize then says so). Never the
            # source the result came with: a workload made from another one (`dataclasses.replace(
            # load_workload("zoo:mlp"), eval=...)`) kept zoo:mlp's, and optimize's candidates rebuilt zoo:mlp,
            # measured with fidelity instead of the user's metric
            query = _query(_canonical(value, options), _string_parameters(value))
            return _with_source(result, "" if query is None else f"{_absolute(path)}:{attr}{query}")
        if result is None:
            fix = ": it builds one but does not return it? end it with `return` of the Workload"
        elif _is_module(result):  # `wl.py:MyNet`, the model class itself: a workload also needs its inputs
            fix = (f": a model is half a workload; wrap it with its inputs, e.g. `workload = dlperf.Workload("
                   f"name=..., make_model={attr}, make_inputs=lambda b: (torch.randn(b, ...),))`, or define "
                   "model() and inputs(batch_size)")
        else:
            fix = ": make it return a dlperf.Workload(...)"
        raise WorkloadError(f"'{path}:{attr}' returned {type(result).__name__}, not a dlperf.Workload{fix}")
    raise WorkloadError(f"'{path}:{attr}' is {_describe_value(value)}, not a dlperf.Workload or a function "
                        "returning one")


def _is_module(value: Any) -> bool:
    try:
        from torch import nn
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False
    return isinstance(value, nn.Module)


def _absolute(path: Path) -> str:
    """`path` made absolute and normalised, symlinks kept (what the user named, from anywhere)."""
    return os.path.abspath(path)


def _with_source(workload: Workload, source: str) -> Workload:
    """`workload` with the spec it was loaded from, an absolute path: exported recipes and candidate processes
    rebuild it from there, whatever their working directory."""
    import dataclasses

    return dataclasses.replace(workload, source=source)


def _from_functions(module: ModuleType, path: Path) -> Workload:
    from dlperf.workload.base import EvalSpec, _check_callable

    # named as the file names them (`model`, not make_model): a module or tensor there is the usual slip
    _check_callable(f"workload file '{path}'", "`model`", module.model, "a function model() returning the model",
                    factory=True)
    _check_callable(f"workload file '{path}'", "`inputs`", module.inputs,
                    "a function inputs(batch_size) returning the positional inputs of one call", factory=True)
    evaluate = getattr(module, "evaluate", None)
    eval_spec = None
    if evaluate is not None:  # not callable was silently no metric: fidelity stood in for the user's accuracy
        _check_callable(f"workload file '{path}'", "`evaluate`", evaluate, "a function evaluate(predict) returning "
                        "the metric")
        metric, higher = getattr(module, "METRIC", "metric"), getattr(module, "HIGHER_IS_BETTER", True)
        if not isinstance(metric, str) or not metric:
            raise WorkloadError(f"workload file '{path}': `METRIC` must be the metric's name as a non-empty string, "
                                f"got {metric!r}")
        if not isinstance(higher, bool):
            raise WorkloadError(f"workload file '{path}': `HIGHER_IS_BETTER` must be True or False, got {higher!r}")
        eval_spec = EvalSpec(evaluate=evaluate, metric_name=metric, higher_is_better=higher)
    elif hasattr(module, "METRIC") or hasattr(module, "HIGHER_IS_BETTER"):
        raise WorkloadError(f"workload file '{path}' sets METRIC or HIGHER_IS_BETTER but defines no evaluate"
                            "(predict): define it, or the metric cannot be measured")
    from dlperf.workload.base import KINDS

    kind = getattr(module, "KIND", "generic")
    if kind not in KINDS:  # was "Workload 'wl': kind 'CNN' is unknown", naming neither the file nor KIND
        raise WorkloadError(f"workload file '{path}': `KIND` must be one of {', '.join(KINDS)}, got {kind!r}")
    return Workload(
        name=path.stem,
        make_model=module.model,
        make_inputs=module.inputs,
        eval=eval_spec,
        source=_absolute(path),
        kind=kind,
    )
