"""feather.read_results: a run's results.h5 (results/FORMAT.md) as numpy arrays."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:  # numpy and h5py are imported on first use: `import feather` needs neither
    import numpy as np

_FORMAT_VERSION = 1


@dataclass
class Results:
    """The tables of results.h5, column-wise (results/FORMAT.md has every column).

    Attributes:
      requests: one array per column of /requests (arrival_ns, first_token_ns, ...), one row per
        request.
      steps: one array per column of /steps (start_ns, step_ns, batch_size, ...), one row per
        engine step.
      step_terms: the cost model's terms of each step (/steps/term: gemm, decode_attention, ...).
      meta: the root attributes; ``provenance`` and ``scenario`` parsed from their JSON text.
    Times are int64 nanoseconds; -1 marks "never happened".
    """

    requests: dict[str, np.ndarray] = field(default_factory=dict)
    steps: dict[str, np.ndarray] = field(default_factory=dict)
    step_terms: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def read_results(path: Union[str, "os.PathLike[str]"]) -> Results:
    """Reads results.h5, or the results.h5 inside a run's output folder.

    Raises FileNotFoundError for a missing file and ValueError for a file that is not a
    feather results file of a known format version.
    """
    import h5py
    import numpy as np

    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "results.h5")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        f = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(f"{path}: not an HDF5 file ({error})") from error
    with f:
        version = f.attrs.get("format_version")
        if version is None or "requests" not in f or "steps" not in f:
            raise ValueError(f"{path}: not a feather results file (no format_version or tables)")
        if int(version) != _FORMAT_VERSION:
            raise ValueError(
                f"{path}: results format_version {int(version)}; this reader knows {_FORMAT_VERSION}"
            )
        meta: dict[str, Any] = {}
        for key, value in f.attrs.items():
            if isinstance(value, bytes):
                value = value.decode()
            if key in ("provenance", "scenario"):
                value = json.loads(value)
            elif isinstance(value, np.generic):
                value = value.item()
            meta[key] = value
        steps = f["steps"]
        return Results(
            requests={k: f["requests"][k][:] for k in f["requests"]},
            steps={k: steps[k][:] for k in steps if k != "term"},
            step_terms={k: steps["term"][k][:] for k in steps["term"]} if "term" in steps else {},
            meta=meta,
        )
