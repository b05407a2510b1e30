"""Stop policies from a name and options, or from a scenario's configuration."""

from __future__ import annotations

import os
from typing import Optional, Union

from feather import _feather
from feather._overrides import Overrides, override_strings


def make_stop_policy(
    name: str,
    *,
    seed: int = 1,
    state_bins: _feather.StateBins = _feather.StateBins.authors,
    **knobs: object,
) -> _feather.StopPolicy:
    """A fresh stop policy: ``make_stop_policy("bandit", exploration=100.0)``.

    Args:
      name: one of ``feather.stop_policy_names()``.
      seed: the seed of Q-learning's exploration draws.
      state_bins: the (b, delta, w) discretization of bandit and qlearning.
      **knobs: the policy's own knobs, by the keys of its scenario section
        (``scheduler.<policy>.<key>``); ``feather.stop_policy_knobs(name)`` lists them with
        their defaults and ranges. Unset knobs keep the authors' constants.

    Raises:
      ValueError: an unknown name, or a knob out of range (named with its range).
      TypeError: a knob the policy does not have, or a value of the wrong type.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"make_stop_policy: seed must be a non-negative int, got {seed!r}")
    if not isinstance(state_bins, _feather.StateBins):
        raise TypeError("make_stop_policy: state_bins must be a feather.StateBins")
    return _feather._make_stop_policy(name, seed, state_bins, dict(knobs))


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
