"""feather.run: ``feather run`` from Python."""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Optional, Union

from feather import _feather
from feather._overrides import Overrides, override_strings

PathLike = Union[str, "os.PathLike[str]"]

_EXIT_UNSERVED = 3


class UnservedError(RuntimeError):
    """A run that could not serve every request (cli/README.md, exit code 3).

    Its outputs were written all the same: ``summary`` holds summary.json as a dict and
    ``out_dir`` the folder, as for a successful run. Set ``limits.allow_unservable=true`` in the
    overrides when rejected requests are expected.
    """

    def __init__(self, message: str, summary: dict[str, Any], out_dir: str):
        super().__init__(message)
        self.summary = summary
        self.out_dir = out_dir


def run(
    scenario: Optional[PathLike] = None,
    overrides: Overrides = None,
    out: Optional[PathLike] = None,
) -> dict[str, Any]:
    """Runs a scenario exactly as ``feather run SCENARIO --set ... --out OUT`` does.

    Args:
      scenario: a scenario YAML file; None runs the built-in default scenario.
      overrides: ``{"workload.requests": 100, "scheduler.stop": "bandit"}`` or
        ``["workload.requests=100", ...]``, the CLI's ``--set`` (scenarios/README.md).
      out: the output folder (default ``out/<scenario name>`` under the current directory). It
        receives summary.json and results.h5 (read it with ``feather.read_results``); an
        existing folder is replaced only when it holds an earlier feather run.

    Returns:
      summary.json as a dict (the same bytes the CLI writes, parsed).

    Raises:
      feather.InputError: a bad scenario or override (every problem, with file:line and key).
      UnservedError: requests that can never be served, or none finished (outputs written).
      KeyboardInterrupt: SIGINT (or SIGTERM) during the run; nothing is written.
      RuntimeError: the output folder cannot be used, or another failure.
      TypeError: arguments of the wrong type.
    """
    scenario_path = "" if scenario is None else os.fspath(scenario)
    out_dir = "" if out is None else os.fspath(out)
    if not isinstance(scenario_path, str) or not isinstance(out_dir, str):
        raise TypeError("scenario and out must be str paths")
    code, text = _feather._run_json(scenario_path, override_strings(overrides), out_dir)
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        raise KeyboardInterrupt(f"feather run interrupted (exit code {code}); nothing written")
    summary = json.loads(text) if text else {}
    written_to = out_dir or f"out/{summary.get('scenario', {}).get('name', '')}"
    if code == _EXIT_UNSERVED:
        raise UnservedError(
            "feather run: requests were left unserved (see stderr and summary['requests_unservable'])",
            summary,
            written_to,
        )
    if code != 0:
        raise RuntimeError(f"feather run failed with exit code {code}")
    return summary
