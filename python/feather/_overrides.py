"""Scenario overrides from Python values to the CLI's ``--set key=value`` strings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Union

Overrides = Union[Mapping[str, object], Sequence[str], None]


def _value_text(value: object) -> str:
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TypeError(
        f"override value {value!r} has type {type(value).__name__}; use a bool, int, float or str"
    )


def override_strings(overrides: Overrides) -> list[str]:
    """``{"a.b": 1}`` or ``["a.b=1"]`` -> ``["a.b=1"]``; None -> ``[]``.

    Raises TypeError for anything else; the scenario loader checks keys and values.
    """
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        out = []
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise TypeError(f"override key {key!r} is not a str")
            out.append(f"{key}={_value_text(value)}")
        return out
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Sequence):
        raise TypeError(
            "overrides must be a dict {key: value} or a list of 'key=value' strings, "
            f"not {type(overrides).__name__}"
        )
    for item in overrides:
        if not isinstance(item, str):
            raise TypeError(f"override {item!r} is not a 'key=value' str")
    return list(overrides)
