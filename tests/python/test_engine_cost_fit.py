"""scripts/engine_cost_fit.py: the cost-table fit recovers a known cost line, drops a term that
would come out negative, holds grid points out, and writes a table the simulator reads.

No engine needed: the observations are synthesized from a known line with seeded noise.
"""

from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
np = pytest.importorskip("numpy")
import engine_cost_fit  # noqa: E402


def _rows(engine, op, truth, grid, noise=0.02, seed=1):
    rng = random.Random(seed)
    rows = []
    for point in grid:
        for rep in range(3):
            inputs = point(rep)
            ns = truth["constant"] + sum(truth[k] * inputs[f] for k, f in (
                ("running", "running"), ("admitted", "admitted"),
                ("admitted_block", "admitted_blocks"), ("waiting", "waiting"),
                ("waiting_token", "waiting_tokens"), ("tree_node", "tree_nodes")) if k in truth)
            rows.append({"engine": engine, "op": op, "grid": list(point(0).values()),
                         "ns": ns * (1 + rng.uniform(-noise, noise)), **inputs})
    return rows


def _sglang_grid():
    return [lambda rep, w=w, p=p, h=h: {"waiting": w, "waiting_tokens": w * p,
                                        "tree_nodes": h + rep}
            for w in (16, 64, 256) for p in (256, 2048, 8192) for h in (2, 1000)]


def test_fit_recovers_a_known_line():
    truth = {"constant": 1e5, "waiting": 1.7e4, "waiting_token": 3.0, "tree_node": 1500.0}
    result = engine_cost_fit.fit_operation(
        _rows("sglang", "dfs-weight", truth, _sglang_grid()),
        ["waiting", "waiting_token", "tree_node"])
    for name, value in truth.items():
        assert result["coef"][name] == pytest.approx(value, rel=0.1), name
    assert result["holdout"]["grid_points"] == 18 // 4  # every fourth grid point held out
    assert result["holdout"]["grid_point_mape"] < 0.03


def test_a_term_the_data_does_not_support_is_dropped_not_negative():
    truth = {"constant": 5e4, "waiting": 2e4}  # the tree does not matter (LPM)
    result = engine_cost_fit.fit_operation(
        _rows("sglang", "lpm", truth, _sglang_grid(), noise=0.05),
        ["waiting", "waiting_token", "tree_node"])
    assert all(v >= 0 for v in result["coef"].values())
    assert result["coef"]["waiting"] == pytest.approx(2e4, rel=0.1)


def test_fit_main_writes_a_table_the_simulator_reads(tmp_path, feather_binary):
    rows = _rows("sglang", "lpm", {"constant": 5e4, "waiting": 2e4}, _sglang_grid())
    rows += _rows("sglang", "dfs-weight", {"constant": 6e4, "tree_node": 900.0}, _sglang_grid())
    vllm_grid = [lambda rep, r=r, a=a: {"running": r + rep, "admitted": a,
                                        "admitted_blocks": a * (10 if r == 16 else 40)}
                 for r in (0, 16, 256) for a in (0, 4, 64)]
    rows += _rows("vllm", "schedule", {"constant": 3e4, "running": 1e4, "admitted": 5e4,
                                       "admitted_block": 1200.0}, vllm_grid)
    data = tmp_path / "rows.jsonl"
    with open(data, "w") as f:
        for engine, version in (("vllm", "0.32.0"), ("sglang", "0.5.23")):
            f.write(json.dumps({"header": {"engine": engine, "version": version, "host": "h",
                                           "cpu_model": "c"}}) + "\n")
        for row in rows:
            f.write(json.dumps(row) + "\n")
    table = tmp_path / "table.yaml"
    assert engine_cost_fit.fit_main(str(table), [str(data)]) == 0
    text = table.read_text()
    assert "source: measured" in text and 'machine: "h (c)"' in text
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"workload: {{requests: 50}}\nscheduler: {{selector: lpm, stop: always}}\n"
                        f"scheduler_time: engine\nscheduler_engine_cost: {table}\n")
    run = subprocess.run([str(feather_binary), "run", str(scenario), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["scheduler_cpu_s"] > 0
    assert summary["scenario"]["resolved"]["engine_cost_operation"] == "sglang_lpm"


def test_copy_from_keeps_the_other_engine_verbatim(tmp_path):
    """engine-cost.sh --sglang-version: SGLang fitted, vLLM copied from the shipped table."""
    shipped = REPO / "results" / "engine-cost" / "amd-epyc-vm.yaml"
    rows = _rows("sglang", "lpm", {"constant": 5e4, "waiting_token": 45.0}, _sglang_grid())
    rows += _rows("sglang", "dfs-weight", {"constant": 6e4, "waiting_token": 48.0,
                                           "tree_node": 1000.0}, _sglang_grid())
    data = tmp_path / "rows.jsonl"
    with open(data, "w") as f:
        f.write(json.dumps({"header": {"engine": "sglang", "version": "0.5.6", "host": "h",
                                       "cpu_model": "c"}}) + "\n")
        for row in rows:
            f.write(json.dumps(row) + "\n")
    table = tmp_path / "table.yaml"
    assert engine_cost_fit.fit_main(str(table), [str(data)], str(shipped)) == 0
    ours, theirs = engine_cost_fit._blocks(str(table)), engine_cost_fit._blocks(str(shipped))
    assert ours["operations.vllm_schedule"] == theirs["operations.vllm_schedule"]
    assert ours["engines.vllm"] == theirs["engines.vllm"]
    assert ours["engines.sglang"] == ['  sglang: {version: "0.5.6"}']
    lpm = "\n".join(ours["operations.sglang_lpm"])
    assert 'machine: "h (c)"' in lpm and "source: measured" in lpm
    assert ours["operations.sglang_lpm"] != theirs["operations.sglang_lpm"]
