"""Runs of TensorBoard event folders, read with ``event_accumulator.EventAccumulator`` (which
drops what a resumed writer purged; ``plugin_event_accumulator`` would keep it).

Every folder holding ``*tfevents*`` files is one run, named by its relative path; fields are
its HPARAMS plugin ``hparams`` (docs/tracking.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.tracking.runs import KeepMetric, TrackedRun, field_text, number

#: kinds of events a reader of scalars does not need (EventAccumulator's size-guidance keys)
_SKIPPED = ("images", "audio", "histograms", "distributions")


def event_folders(root: Path) -> list[Path]:
    """Folders under ``root`` (itself included) holding event files, in path order."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if any("tfevents" in f for f in files):
            found.append(Path(folder))
    return found


def read(location: str, *, experiment: str | None, keep: KeepMetric) -> list[TrackedRun]:
    """One run per event folder under ``location``, with the scalars ``keep`` accepts
    (ConfigError for an ``experiment``: TensorBoard has none)."""
    root = Path(location)
    if experiment is not None:
        raise ConfigError(
            f"tensorboard:{location}: TensorBoard runs have no experiment; point at the "
            "experiment's folder instead of --experiment"
        )
    if not root.is_dir():
        raise ConfigError(f"tensorboard:{location}: no such folder")
    folders = event_folders(root)
    if not folders:
        raise ConfigError(f"tensorboard:{location}: no TensorBoard event files (*tfevents*) in it")
    return [_run(root, folder, keep) for folder in folders]


def _run(root: Path, folder: Path, keep: KeepMetric) -> TrackedRun:
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(
        str(folder),
        # every step of every scalar; of what a reader of scalars does not need, one event
        size_guidance={ea.SCALARS: 0, ea.TENSORS: 0, **dict.fromkeys(_SKIPPED, 1)},
    )
    acc.Reload()
    tags = acc.Tags()
    metrics = {}
    for tag in tags["scalars"]:  # simple_value summaries: 32-bit floats
        if keep(tag):
            metrics[tag] = _series((e.step, _float32(e.value)) for e in acc.Scalars(tag))
    for tag in tags["tensors"]:  # TF2's tf.summary.scalar
        if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars" and keep(tag):
            metrics[tag] = _series((e.step, _tensor(e.tensor_proto)) for e in acc.Tensors(tag))
    name = folder.relative_to(root).as_posix()
    name = root.resolve().name if name == "." else name
    return TrackedRun(
        backend="tensorboard", id=name, name=name, fields=_hparams(acc), metrics=metrics
    )


def _series(points) -> dict[int, float]:
    return {step: v for step, v in points if v is not None}


def _float32(value: float) -> float | None:
    """A 32-bit float as the shortest decimal that rounds to it: 0.1 logged reads back as
    0.1, not 0.10000000149 (what a float64 becomes in a 32-bit ``simple_value``)."""
    import numpy as np

    return number(float(str(np.float32(value))))


def _tensor(proto) -> float | None:
    """A scalar tensor's value (a 32-bit float the way `_float32` reads it)."""
    import numpy as np
    from tensorboard.util import tensor_util

    array = tensor_util.make_ndarray(proto)
    if array.size != 1:
        return None
    value = array.reshape(()).item()
    return _float32(value) if array.dtype == np.float32 else number(value)


def _hparams(acc) -> dict[str, str]:
    """The run's hyperparameters (its ``session_start_info``), as text."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    out: dict[str, str] = {}
    try:
        contents = acc.PluginTagToContent("hparams")
    except KeyError:  # no hyperparameters logged
        return out
    for content in contents.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.WhichOneof("data") != "session_start_info":
            continue
        for key, value in data.session_start_info.hparams.items():
            kind = value.WhichOneof("kind")
            raw = {
                "number_value": value.number_value,
                "string_value": value.string_value,
                "bool_value": value.bool_value,
            }.get(kind)
            text = field_text(raw)
            if text is not None:
                out[key] = text
    return out
