"""engine_cost_fit.py: fits the engine scheduling cost table from engine_cost.py's observations.

Per operation, ns = sum_k coef_k * feature_k, by least squares on the relative error (each row
divided by its measured time, so a 50 us call counts as much as a 50 ms one). A term whose
coefficient comes out negative is dropped and the fit redone (a cost cannot shrink with more
work). Grid points (one workload configuration each) are split: every fourth is held out and
only predicted; the table reports the error on the fitted and on the held-out points, per row
(MAPE) and per grid point (the error of the summed time of the point's rows). The coefficients
shipped are then refitted on every grid point.

The table's schema: results/engine-cost/README.md; the C++ reader: sim/io/engine_cost_yaml.h.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

# Operation -> (engine, the call measured, features). Feature names are the table's term names
# (without the "per_" prefix and "_ns" suffix) and the round inputs of sim/serving/engine_cost.h.
OPERATIONS: dict[str, tuple[str, str, str, list[str]]] = {
    "vllm_schedule": ("vllm", "schedule", "vllm.v1.core.sched.scheduler.Scheduler.schedule()",
                      ["running", "admitted", "admitted_block"]),
    "sglang_lpm": ("sglang", "lpm", "sglang.srt.managers.schedule_policy.SchedulePolicy."
                   "calc_priority (policy lpm) with RadixCache.match_prefix",
                   ["waiting", "waiting_token", "tree_node"]),
    "sglang_dfs_weight": ("sglang", "dfs-weight", "sglang.srt.managers.schedule_policy."
                          "SchedulePolicy.calc_priority (policy dfs-weight) with "
                          "RadixCache.match_prefix and dfs_weight_order",
                          ["waiting", "waiting_token", "tree_node"]),
}

_ROW_FIELD = {"running": "running", "admitted": "admitted", "admitted_block": "admitted_blocks",
              "waiting": "waiting", "waiting_token": "waiting_tokens", "tree_node": "tree_nodes"}


def _design(rows: list[dict[str, Any]], features: list[str]) -> np.ndarray:
    x = np.ones((len(rows), 1 + len(features)))
    for j, name in enumerate(features):
        x[:, j + 1] = [float(r[_ROW_FIELD[name]]) for r in rows]
    return x


def _fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative relative least squares by dropping negative terms one at a time."""
    active = list(range(x.shape[1]))
    while True:
        w = 1.0 / y
        coef_active, *_ = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)
        coef = np.zeros(x.shape[1])
        coef[active] = coef_active
        negative = [j for j in active if coef[j] < 0]
        if not negative:
            return coef
        active.remove(min(negative, key=lambda j: coef[j]))


def _errors(rows, x, y, coef) -> dict[str, float]:
    pred = x @ coef
    points: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        points.setdefault(json.dumps(r["grid"]), []).append(i)
    point_err = [abs(pred[idx].sum() - y[idx].sum()) / y[idx].sum() for idx in points.values()]
    return {"rows": len(rows), "grid_points": len(points),
            "mape": float(np.mean(np.abs(pred - y) / y)),
            "grid_point_mape": float(np.mean(point_err)),
            "grid_point_max_error": float(np.max(point_err))}


def fit_operation(rows: list[dict[str, Any]], features: list[str]) -> dict[str, Any]:
    grid = sorted({json.dumps(r["grid"]) for r in rows})
    held = {g for i, g in enumerate(grid) if i % 4 == 3}
    train = [r for r in rows if json.dumps(r["grid"]) not in held]
    test = [r for r in rows if json.dumps(r["grid"]) in held]
    y_train = np.array([float(r["ns"]) for r in train])
    coef_train = _fit(_design(train, features), y_train)
    result = {"fit": _errors(train, _design(train, features), y_train, coef_train)}
    if test:
        y_test = np.array([float(r["ns"]) for r in test])
        result["holdout"] = _errors(test, _design(test, features), y_test, coef_train)
    y_all = np.array([float(r["ns"]) for r in rows])
    coef = _fit(_design(rows, features), y_all)
    result["all"] = _errors(rows, _design(rows, features), y_all, coef)
    result["coef"] = {"constant": float(coef[0]),
                      **{name: float(coef[j + 1]) for j, name in enumerate(features)}}
    return result


def _read(paths: list[str]) -> tuple[dict[str, dict], list[dict[str, Any]]]:
    headers, rows = {}, []
    for path in paths:
        with open(path) as f:
            for line in f:
                item = json.loads(line)
                if "header" in item:
                    headers[item["header"]["engine"]] = item["header"]
                else:
                    rows.append(item)
    return headers, rows


def _q(text: str) -> str:
    return json.dumps(text)


def _blocks(table: str) -> dict[str, list[str]]:
    """A table's `engines:` entries and `operations:` blocks, by name, as text lines."""
    blocks: dict[str, list[str]] = {}
    section, name = "", ""
    for line in open(table).read().splitlines():
        if line and not line.startswith((" ", "#")):
            section, name = line.rstrip(":"), ""
        elif section in ("engines", "operations") and line.startswith("  ") and \
                not line.startswith("   "):
            name = f"{section}.{line.strip().split(':')[0]}"
            blocks[name] = [line]
        elif name:
            blocks[name].append(line)
    return blocks


def fit_main(out: str, paths: list[str], copy_from: str | None = None) -> int:
    """Fits every operation with rows in paths; with copy_from, an operation (and its engine's
    version) without rows is copied verbatim from that table, sources unchanged."""
    headers, rows = _read(paths)
    copied = _blocks(copy_from) if copy_from else {}
    lines = ["# Engine scheduling cost table: CPU time of the real engines' scheduling calls per",
             "# round, measured by scripts/engine-cost.sh (scripts/engine_cost.py) on the machine",
             "# named below and fitted by least squares (scripts/engine_cost_fit.py). Schema:",
             "# results/engine-cost/README.md; read by `scheduler_time: engine`."]
    engines = sorted(set(headers) | {OPERATIONS[op][0] for op in OPERATIONS
                                     if f"operations.{op}" in copied})
    if copied:
        lines.append(f"# Operations of engines not measured here ({', '.join(sorted(set(engines) - set(headers)))})"
                     f" are copied from {copy_from}.")
    lines.append("measured_on:")
    some = next(iter(headers.values()))
    for key in ("host", "cpu_model", "python", "date_utc"):
        if some.get(key):
            lines.append(f"  {key}: {_q(str(some[key]))}")
    lines.append("engines:")
    for engine in engines:
        if engine in headers:
            lines.append(f"  {engine}: {{version: {_q(headers[engine]['version'])}}}")
        else:
            lines += copied[f"engines.{engine}"]
    lines.append("operations:")
    report = []
    for op, (engine, row_op, call, features) in OPERATIONS.items():
        op_rows = [r for r in rows if r["engine"] == engine and r["op"] == row_op]
        if not op_rows:
            lines += copied.get(f"operations.{op}", [])
            continue
        result = fit_operation(op_rows, features)
        machine = f"{headers[engine].get('host', '')} ({headers[engine].get('cpu_model', '')})"
        lines += [f"  {op}:", f"    call: {_q(call)}", "    fit:"]
        for part in ("fit", "holdout", "all"):
            if part in result:
                e = result[part]
                lines.append(f"      {part}: {{rows: {e['rows']}, grid_points: {e['grid_points']},"
                             f" mape: {e['mape']:.4f}, grid_point_mape: "
                             f"{e['grid_point_mape']:.4f}, grid_point_max_error: "
                             f"{e['grid_point_max_error']:.4f}}}")
        lines.append("    terms:")
        for name, value in result["coef"].items():
            key = "constant_ns" if name == "constant" else f"per_{name}_ns"
            lines.append(f"      {key}: {{value: {value:.6g}, source: measured, "
                         f"machine: {_q(machine)}}}")
        report.append(f"{op}: " + ", ".join(f"{k}={v:.4g}" for k, v in result["coef"].items()) +
                      f"; held-out grid-point error {result.get('holdout', result['fit'])['grid_point_mape']:.1%}"
                      f" (max {result.get('holdout', result['fit'])['grid_point_max_error']:.1%}),"
                      f" row MAPE {result.get('holdout', result['fit'])['mape']:.1%}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(report))
    print(f"wrote {out}")
    return 0
