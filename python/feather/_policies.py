"""Stop policies from a name and options, or from a scenario's configuration."""

from __future__ import annotations

import os
from typing import Optional, Union

from feather import _feather
from feather._overrides import Overrides, override_strings


def make_stop_policy(
    name: str, options: Optional[_feather.StopPolicyOptions] = None, **fields: object
) -> _feather.StopPolicy:
    """A fresh stop policy: ``make_stop_policy("bandit", bandit_exploration=100.0)``.

    Args:
      name: one of ``feather.stop_policy_names()``.
      options: a StopPolicyOptions to start from (default: the authors' constants).
      **fields: StopPolicyOptions fields to set on top.

    Raises:
      ValueError: an unknown name, or options out of range (all of them named in the message).
      TypeError: an unknown field, or a value of the wrong type.
    """
    opts = _feather.StopPolicyOptions()
    if options is not None:
        if not isinstance(options, _feather.StopPolicyOptions):
            raise TypeError("options must be a feather.StopPolicyOptions")
        for field in _option_fields():
            setattr(opts, field, getattr(options, field))
    known = _option_fields()
    for field, value in fields.items():
        if field not in known:
            raise TypeError(
                f"make_stop_policy: unknown option {field!r} (known: {', '.join(sorted(known))})"
            )
        setattr(opts, field, value)
    return _feather._make_stop_policy(name, opts)


def stop_policy_from_scenario(
    scenario: Optional[Union[str, "os.PathLike[str]"]] = None, overrides: Overrides = None
) -> _feather.StopPolicy:
    """The stop policy a scenario configures (``scheduler.stop`` and its options; loaded from
    ``scheduler.policy.load`` and frozen by ``scheduler.policy.learning: false`` when set).

    ``scenario`` None means the built-in default scenario; ``overrides`` as for feather.run.
    Raises feather.InputError for a bad scenario.
    """
    path = "" if scenario is None else os.fspath(scenario)
    return _feather._scenario_stop_policy(path, override_strings(overrides))


def _option_fields() -> frozenset[str]:
    return frozenset(
        name
        for name in dir(_feather.StopPolicyOptions)
        if not name.startswith("_")
    )
