"""One configuration dialect: declared fields (`param`: default, doc line, range), one strict
pydantic validator, one `ConfigError` format naming the full key path, and the text of
``describe``, ``--help`` and the docs (see docs/config.md).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import inspect
import math
import re
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Annotated, Any, Union

import pydantic
import yaml
from pydantic import ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from dataflex_rl.core.registry import ConfigError, suggest

#: the bound keywords of `param`, with the comparison they state
BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=True)


def param(
    default: Any = MISSING,
    doc: str = "",
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple | None = None,
    expect: str | None = None,
) -> Any:
    """Declare a config field: default (omit it for a required key), doc line and range.

    Bounds apply to a number or to every number of a list or mapping; mutable defaults are
    copied per instance; ``expect`` replaces the type name in "expected ..." messages.
    """
    choices = tuple(choices) if choices is not None else None
    meta = dict(doc=doc, ge=ge, gt=gt, le=le, lt=lt, choices=choices, expect=expect)
    if default is MISSING:
        return field(metadata=meta)
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


# ------------------------------------------------------------------------------ type names
def type_name(tp: Any) -> str:
    """``list[float] | null``-style name of an annotation, for messages and docs."""
    tp = _strip(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp))


@functools.cache
def _hints(schema: type) -> dict[str, Any]:
    """The evaluated field annotations of a class (memoized: evaluating string annotations
    dominated the cost of building a config)."""
    return typing.get_type_hints(schema)


def _strip(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _is_schema(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _bounds(meta: dict) -> dict:
    return {k: meta[k] for k, _ in BOUNDS if meta.get(k) is not None}


def range_text(meta: dict, tp: Any = None) -> str:
    """The declared range as text: ``[0, 1)``, ``one of 'a', 'b'``, ``finite``, ``true/false``,
    or what a non-numeric value must be (``expect``)."""
    if meta.get("choices") is not None:
        return "one of " + ", ".join(map(repr, meta["choices"]))
    b = _bounds(meta)
    if not b and meta.get("expect"):
        return meta["expect"]
    if not b:
        leaves = _leaf_types(tp) if tp is not None else set()
        if leaves and leaves <= {bool, type(None)}:
            return "true/false"
        if leaves & {int, float}:
            return "finite" if float in leaves else "any integer"
        return "any"
    b = {k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in b.items()}
    lo = f"[{b['ge']}" if "ge" in b else f"({b['gt']}" if "gt" in b else "(-inf"
    hi = f"{b['le']}]" if "le" in b else f"{b['lt']})" if "lt" in b else "inf)"
    return f"{lo}, {hi}"


def _leaf_types(tp: Any) -> set:
    tp = _strip(tp)
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType, list, tuple, dict):
        args = typing.get_args(tp)[1:] if origin is dict else typing.get_args(tp)
        return set().union(*(_leaf_types(a) for a in args if a is not Ellipsis))
    return {tp}


# ------------------------------------------------------------------------------ pydantic models
def _choice_check(choices: tuple) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in choices:
            raise PydanticCustomError("choice", "not one of the choices", {"choices": choices})
        return value

    return check


def _tuple_as_list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _pydantic_type(tp: Any, meta: dict) -> Any:
    """The pydantic annotation checking ``tp`` and the declared range of ``meta``."""
    tp = _strip(tp)
    if tp is Any or tp is type(None):
        return tp
    if _is_schema(tp):
        model = _model(tp)

        def keep_instance(value: Any, handler: Callable) -> Any:
            return value if isinstance(value, tp) else handler(value)

        return Annotated[model, pydantic.WrapValidator(keep_instance)]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return Union[tuple(_pydantic_type(a, meta) for a in args)]  # noqa: UP007 (built at run time)
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return Annotated[
            list[_pydantic_type(args[0], meta)], pydantic.BeforeValidator(_tuple_as_list)
        ]
    if origin is dict:
        return dict[_pydantic_type(args[0], {}), _pydantic_type(args[1], meta)]
    if tp is list:
        return Annotated[list, pydantic.BeforeValidator(_tuple_as_list)]
    out = tp
    if tp in (int, float) and _bounds(meta):
        out = Annotated[tp, Field(**_bounds(meta))]
    if meta.get("choices") is not None:
        out = Annotated[out, pydantic.AfterValidator(_choice_check(meta["choices"]))]
    return out


@functools.cache
def _model(schema: type) -> type[pydantic.BaseModel]:
    """The strict pydantic model of a declared dataclass (memoized per class)."""
    hints = _hints(schema)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        if not f.init:
            continue
        required = f.default is MISSING and f.default_factory is MISSING
        # defaults are never validated by pydantic: the dataclass fills them in
        fields[f.name] = (
            _pydantic_type(hints[f.name], dict(f.metadata)),
            ... if required else None,
        )
    return pydantic.create_model(f"{schema.__name__}Schema", __config__=_STRICT, **fields)


# ------------------------------------------------------------------------------ messages
_TYPE_ERRORS = frozenset(
    "int_type float_type bool_type string_type list_type dict_type tuple_type none_required "
    "is_instance_of model_type model_attributes_type dataclass_type int_from_float "
    "literal_error".split()
)


def _real_path(loc: tuple, data: Any, kind: str = "") -> tuple[list, Any]:
    """The part of a pydantic ``loc`` that indexes into ``data`` (pydantic's union and
    validator tags dropped; the last part of a ``missing`` error kept), and the value there."""
    path, node = [], data
    for i, part in enumerate(loc):
        indexes = (isinstance(node, dict) and part in node) or (
            isinstance(node, (list, tuple)) and isinstance(part, int) and 0 <= part < len(node)
        )
        if indexes:
            path.append(part)
            node = node[part]
        elif kind == "missing" and i == len(loc) - 1:
            path.append(part)
            return path, None
    return path, node


#: a ``where`` ending so names a file: its keys follow after ``": "`` (``cfg.yaml: optim.lr``)
_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def key_path(where: str, key: str | int) -> str:
    """The place of ``key`` under ``where``, for messages: ``engine.optim.lr``,
    ``strategies[1]``, under a file or override ``quickstart.yaml: optim.lr``."""
    if isinstance(key, int):
        return f"{where}[{key}]" if where else f"[{key}]"
    if not where:
        return key
    if where.endswith(_FILE_SUFFIXES) or where.startswith("override "):
        return f"{where}: {key}"
    return f"{where}.{key}"


def _join(where: str, path: list) -> str:
    out = where
    for p in path:
        out = key_path(out, p)
    return out


def _annotation_at(schema: type, path: list) -> Any:
    """The declared annotation at ``path`` under ``schema`` (None where it cannot be told)."""
    tp: Any = schema
    for part in path:
        tp = _strip(tp)
        if typing.get_origin(tp) in (Union, types.UnionType):
            members = [_strip(a) for a in typing.get_args(tp)]
            if isinstance(part, str):
                fit = [a for a in members if _is_schema(a) or typing.get_origin(a) is dict]
            else:
                fit = [a for a in members if typing.get_origin(a) in (list, tuple)]
            if not fit:
                return None
            tp = fit[0]
        if _is_schema(tp) and isinstance(part, str):
            hints = _hints(tp)
            if part not in hints:
                return None
            tp = hints[part]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        elif typing.get_origin(tp) in (list, tuple) and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        else:
            return None
    return tp


def _keys_of(schema: type, path: list) -> list[str]:
    tp = _annotation_at(schema, path)
    tp = _strip(tp) if tp is not None else None
    if tp is not None and typing.get_origin(tp) in (Union, types.UnionType):
        tp = next((a for a in typing.get_args(tp) if _is_schema(a)), None)
    if tp is None or not _is_schema(tp):
        return []
    return [f.name for f in dataclasses.fields(tp) if f.init]


def _format(err: dict, data: Any, schema: type, where: str, noun: str) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    path, value = _real_path(err["loc"], data, kind)
    value = err.get("input", value)  # the value given where the check failed
    at = _join(where, path)
    if kind == "extra_forbidden":
        valid = _keys_of(schema, path[:-1])
        aliases = list(getattr(_annotation_at(schema, path[:-1]) or schema, "aliases", {}) or {})
        return (
            f"{at}: unknown {noun}.{suggest(str(path[-1]), valid + aliases)} "
            f"Valid{' keys' if noun == 'key' else ''}: {', '.join(valid) or '(none)'}"
        )
    if kind == "missing":
        return f"{_join(where, path[:-1]) or 'config'}: missing required key {path[-1]!r}"
    if kind == "choice":
        choices = [str(c) for c in ctx["choices"]]
        return (
            f"{at}: must be one of {', '.join(map(repr, ctx['choices']))}, got {value!r}."
            f"{suggest(str(value), choices)}"
        )
    bound = [(key, sym) for key, sym in BOUNDS if key in ctx]
    if kind.startswith(("greater_than", "less_than")) and bound:
        key, sym = bound[0]
        return f"{at}: must be {sym} {ctx[key]}, got {value!r}"
    if kind == "finite_number":
        return f"{at}: must be a finite number, got {value!r}"
    if kind in _TYPE_ERRORS:
        tp = _annotation_at(schema, path)
        expected = err["msg"] if tp is None else type_name(tp)
        expected = "a mapping" if tp is not None and _is_schema(_strip(tp)) else expected
        owner = _annotation_at(schema, path[:-1]) if path and isinstance(path[-1], str) else None
        if owner is not None and _is_schema(_strip(owner)):
            f = {f.name: f for f in dataclasses.fields(_strip(owner))}.get(path[-1])
            expected = (f.metadata.get("expect") if f is not None else None) or expected
        return f"{at}: expected {expected}, got {type(value).__name__} ({value!r})"
    return f"{at}: {err['msg']}"


def _first_error(errors: list[dict], data: Any) -> dict:
    """The error most specific to a key: a range, key or choice error before a type error;
    among type errors the deepest (a union branch that matched further)."""

    def rank(e: dict) -> tuple:
        path, _ = _real_path(e["loc"], data, e["type"])
        return (e["type"] in _TYPE_ERRORS, -len(path) if e["type"] in _TYPE_ERRORS else 0)

    return min(errors, key=rank)


def config_error(
    exc: ValidationError, data: Any, schema: type, where: str, noun: str = "key"
) -> ConfigError:
    """The `ConfigError` for a pydantic error raised while validating ``data`` as ``schema``."""
    return ConfigError(_format(_first_error(exc.errors(), data), data, schema, where, noun))


# ------------------------------------------------------------------------------ validation
def check(schema: type, data: dict, where: str, noun: str = "key") -> None:
    """Validate mapping ``data`` against ``schema`` without building anything (ConfigError:
    the first problem)."""
    try:
        _model(schema).model_validate(data)
    except ValidationError as e:
        raise config_error(e, data, schema, where, noun) from None


def validate(schema: type, data: Any, where: str, noun: str = "key") -> Any:
    """Build an instance of the declared dataclass ``schema`` from a mapping (None: defaults).

    Nested declared dataclasses are built from nested mappings; the values stored are the
    ones given; a ``__post_init__`` error ``Class.key: ...`` is re-rooted at ``where``.
    """
    if data is None:
        data = {}
    if isinstance(data, schema):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    check(schema, data, where, noun)
    return _build(schema, data, where)


def _build(schema: type, data: dict, where: str) -> Any:
    hints = _hints(schema)
    kwargs = {}
    for key, value in data.items():
        nested = _declared_schema(hints[key]) if isinstance(value, dict) else None
        if nested is not None:
            kwargs[key] = _build(nested, value, key_path(where, key))
        else:
            kwargs[key] = copy.deepcopy(value)
    try:
        return schema(**kwargs)
    except ConfigError as e:  # a cross-field check: "Cls.key: ..." -> "where.key: ..."
        msg, prefix = str(e), f"{schema.__name__}."
        raise ConfigError(
            key_path(where, msg[len(prefix) :]) if msg.startswith(prefix) else f"{where}: {msg}"
        ) from None


def check_fields(obj: Any, where: str | None = None) -> None:
    """Check every field of a declared dataclass instance (nested instances as they are)."""
    schema = type(obj)
    data = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
    check(schema, data, where or schema.__name__)


@dataclass
class Checked:
    """Base of declared dataclasses whose fields are checked on construction."""

    def __post_init__(self) -> None:
        check_fields(self)


@functools.cache
def signature_schema(func: Callable) -> type:
    """A declared dataclass of ``func``'s keyword parameters (annotations and defaults), so
    keyword arguments from a config (a domain's difficulty knobs, a user class's constructor)
    are checked by the same validator: types, unknown keys with close matches, key paths."""
    hints = _hints(func)
    fields = []
    for p in inspect.signature(func).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = MISSING if p.default is inspect.Parameter.empty else p.default
        fields.append((p.name, hints.get(p.name, Any), param(default, "")))
    name = getattr(func, "__qualname__", "call").replace(".", "_").replace("<", "").replace(">", "")
    return dataclasses.make_dataclass(f"{name}_args", fields, kw_only=True)


# ------------------------------------------------------------------------------ docs and help
def field_rows(schema: type, prefix: str = "") -> list[dict]:
    """One row per leaf field (nested declared dataclasses flattened to dotted keys): key,
    type, default, range and doc, for ``describe``, ``--help`` and the docs."""
    hints = _hints(schema)
    rows = []
    for f in dataclasses.fields(schema):
        if not f.init:
            continue
        tp = _strip(hints[f.name])
        if _is_schema(tp):
            rows += field_rows(tp, f"{prefix}{f.name}.")
            continue
        default = f.default
        if f.default_factory is not MISSING:
            default = f.default_factory()
        row = {"name": f"{prefix}{f.name}", "type": type_name(tp), "default": default}
        rows.append(
            {**row, "range": range_text(dict(f.metadata), tp), "doc": f.metadata.get("doc", "")}
        )
    return rows


def help_text(schema: type, title: str, width: int = 100) -> str:
    """``title`` and, per key, its doc, type, default and range (an ``--help`` epilog)."""
    lines = [title]
    for r in field_rows(schema):
        default = "required"
        if r["default"] is not MISSING:
            default = yaml.safe_dump(r["default"], default_flow_style=True)
            default = default.strip().removesuffix("...").strip()
        rng = "" if r["range"] in ("any", "true/false") else f"; range {r['range']}"
        lines.append(f"  {r['name']}")
        lines.append(
            textwrap.fill(
                f"{r['doc']} ({r['type']}; default {default}{rng})",
                width,
                initial_indent=" " * 6,
                subsequent_indent=" " * 6,
            )
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ overrides
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def parse_scalar(text: str) -> Any:
    """A ``key=value`` value as YAML (``3e-4`` is a float, as in YAML 1.2; ``[a, b]`` a list)."""
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot read {text!r} as a YAML value ({e})") from None
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    return value


def apply_overrides(
    data: Any, overrides: list[str] | tuple[str, ...], schema: type, where: str = "the config"
) -> dict:
    """``data`` (a mapping or None) with ``key.sub=value`` overrides set, before validation.

    A path must follow declared keys inside declared dataclasses; below a free-form mapping
    any key goes; missing mappings are created. ``where`` names ``data`` (the file).
    """
    out = copy.deepcopy(data) if data is not None else {}
    if not isinstance(out, dict):
        raise ConfigError(f"{where}: the top level must be a mapping to override keys")
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise ConfigError(
                f"override {item!r}: an override is KEY=VALUE with a dotted KEY "
                "(e.g. optim.lr=3e-4)"
            )
        parts = key.split(".")
        tp: Any = schema
        node = out
        for i, part in enumerate(parts):
            declared = _declared_schema(tp)
            if declared is not None:
                valid = [f.name for f in dataclasses.fields(declared) if f.init]
                if part not in valid:
                    aliases = list(getattr(declared, "aliases", {}) or {})
                    if part not in aliases:
                        raise ConfigError(
                            f"override {item}: unknown key {part!r} of "
                            f"{'.'.join(parts[:i]) or 'the config'}."
                            f"{suggest(part, valid + aliases)} Valid keys: {', '.join(valid)}"
                        )
                tp = _hints(declared).get(part, Any)
            else:
                tp = Any
            if i == len(parts) - 1:
                node[part] = parse_scalar(text)
                break
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(
                    f"override {item}: {'.'.join(parts[: i + 1])} is {child!r}, not a "
                    f"mapping; set it as a whole ({'.'.join(parts[: i + 1])}=...)"
                )
            node = child
    return out


def with_overrides(
    data: Any,
    overrides: list[str] | tuple[str, ...],
    schema: type,
    where: str,
    build: Callable[[dict, list[str]], Any],
) -> Any:
    """``build(data with the overrides set, the overrides)``; a problem is reported where it is.

    When ``build`` refuses, the overrides are applied one at a time to find the first that
    brings the refusal in, and the message names it (``override optim.lr=abc: ...``); a
    problem already in ``data`` keeps the file's name.
    """
    overrides = list(overrides)
    merged = apply_overrides(data, overrides, schema, where)  # names a bad override itself
    try:
        return build(merged, overrides)
    except ConfigError as e:
        if not overrides:
            raise
        refusal, error = e, str(e)
    for k in range(len(overrides) + 1):
        try:
            build(apply_overrides(data, overrides[:k], schema, where), overrides[:k])
        except ConfigError as e:
            if str(e) != error:
                continue
            if k == 0:
                break  # the data's own problem, named by the file
            raise ConfigError(_blame(error, where, overrides[k - 1])) from refusal
    raise refusal


def _blame(message: str, where: str, item: str) -> str:
    """``message`` (about ``where``) re-worded to name the override ``item`` that caused it."""
    key = item.partition("=")[0].strip()
    for head in (f"{where}: ", f"{where}."):
        if message.startswith(head):
            message = message[len(head) :]
            break
    return f"override {item}: {message.removeprefix(f'{key}: ')}"


def _declared_schema(tp: Any) -> type | None:
    tp = _strip(tp)
    if _is_schema(tp):
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        return next((a for a in map(_strip, typing.get_args(tp)) if _is_schema(a)), None)
    return None


# ------------------------------------------------------------------------------ command line
def number_type(
    kind: type,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses ``kind`` (int or float) and checks the range; its
    ``range`` attribute is the range text for help."""
    meta = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    tp = Annotated[kind, Field(**_bounds(meta))] if _bounds(meta) else kind
    adapter = pydantic.TypeAdapter(tp, config=_STRICT)

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        try:
            adapter.validate_python(value)
        except ValidationError as e:
            msg = _format(e.errors()[0], value, int, "", "key")
            raise argparse.ArgumentTypeError(msg.removeprefix(": ")) from None
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    parse.range = range_text(meta, kind)  # type: ignore[attr-defined]
    return parse


def field_type(schema: type, name: str) -> Callable[[str], Any]:
    """`number_type` from the declaration of field ``name`` of ``schema`` (one source of truth
    for a config key and the command-line option that sets it)."""
    f = next(f for f in dataclasses.fields(schema) if f.name == name)
    kind = _strip(_hints(schema)[name])
    kind = next((a for a in typing.get_args(kind) if a in (int, float)), kind)
    return number_type(kind, **_bounds(dict(f.metadata)))


def with_range(help_text: str, type_: Callable) -> str:
    """``help_text`` followed by the option's range, e.g. ``"bootstrap resamples; [100, inf)"``."""
    return f"{help_text}; range {type_.range}"  # type: ignore[attr-defined]
