"""scripts/compare_calibrations.py: steps matched by label, per-term medians of second / first,
terms a step did not spend time in skipped, and exit 2 naming an unreadable file.
"""

from __future__ import annotations

import csv
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "compare_calibrations.py"
TERMS = ["gemm", "decode_attention", "kv_reuse", "cascade_prefix", "prefill_attention", "overhead",
         "total"]


def _write(path, rows):
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, ["label"] + [f"measured_{t}_ns" for t in TERMS])
        writer.writeheader()
        for label, gemm, decode in rows:
            writer.writerow({"label": label, "measured_gemm_ns": gemm,
                             "measured_decode_attention_ns": decode, "measured_kv_reuse_ns": 0,
                             "measured_cascade_prefix_ns": 0, "measured_prefill_attention_ns": 0,
                             "measured_overhead_ns": 10, "measured_total_ns": gemm + decode + 10})


def test_medians_per_term_over_steps_matched_by_label(tmp_path):
    _write(tmp_path / "a.csv", [("s1", 100, 50), ("s2", 200, 0), ("s3", 300, 30)])
    # s2 slower by 1.3, s1 by 1.1, s3 by 1.2 in gemm; an extra step only in the second file.
    _write(tmp_path / "b.csv", [("s2", 260, 0), ("s1", 110, 55), ("s3", 360, 36), ("s9", 1, 1)])
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "a.csv"),
                          str(tmp_path / "b.csv")], capture_output=True, text=True, check=True)
    lines = {line.split()[0]: line for line in run.stdout.splitlines()}
    assert run.stdout.startswith("3 of 4 steps matched by label")
    assert "steps    3" in lines["gemm"] and "median 1.200" in lines["gemm"]
    # decode_attention: s2 spent nothing there, so two steps, both 1.1 and 1.2 -> median 1.150.
    assert "steps    2" in lines["decode_attention"] and "median 1.150" in lines["decode_attention"]
    assert "cascade_prefix" not in lines
    assert "median 1.000" in lines["overhead"]


def test_an_unreadable_file_exits_2_naming_it(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.csv"),
                          str(tmp_path / "missing.csv")], capture_output=True, text=True)
    assert run.returncode == 2
    assert "missing.csv" in run.stderr
