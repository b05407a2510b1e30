"""Differential test: feather's SGLang admission rule (sim/serving/sglang_prefill_adder.h, bound as
feather._feather.sglang_prefill_admit) against SGLang 0.5.6's own PrefillAdder, run through
scripts/sglang_prefill_adder.py in SGLang's interpreter (FEATHER_SGLANG_056_VENV, default
~/.cache/feather/venv-sglang-056). Skips, saying why, when that interpreter or SGLang's import is
missing. Mocks around PrefillAdder are described in the script.
"""

import json
import os
import pathlib
import random
import subprocess
import tempfile

import pytest

import feather._feather as core

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV = pathlib.Path(
    os.environ.get("FEATHER_SGLANG_056_VENV", pathlib.Path.home() / ".cache/feather/venv-sglang-056"))


def _random_state(rng: random.Random) -> dict:
    waiting = []
    for _ in range(rng.randint(1, 30)):
        max_new = rng.choice([1, 16, 128, 512, 2048, 6000])
        output_len = rng.randint(0, max_new - 1) if rng.random() < 0.2 else 0
        waiting.append([rng.randint(1, 6000), max_new, output_len])
    return {
        "page_size": rng.choice([1, 1, 16]),
        "new_token_ratio": round(rng.uniform(0.05, 1.0), 4),
        "available_tokens": rng.randint(0, 200000),
        "rem_input_tokens": rng.choice([16384, 8192, 2048, rng.randint(1, 20000)]),
        "rem_chunk_tokens": rng.choice([-1, 8192, 2048, rng.randint(1, 10000)]),
        "max_running_requests": rng.randint(1, 80),
        "running_remaining": [rng.choice([0, 1, rng.randint(1, 9000)])
                              for _ in range(rng.randint(0, 60))],
        "waiting": waiting,
    }


def _sglang_admissions(states: list) -> list:
    python = VENV / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"SGLang 0.5.6 not installed at {VENV} (set FEATHER_SGLANG_056_VENV)")
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as work:
        # No GPU driver: the CUDA toolkit's stub libcuda lets sgl-kernel load (never called).
        for stub in ("/usr/local/cuda/lib64/stubs/libcuda.so", "/usr/local/cuda/lib/stubs/libcuda.so"):
            if os.path.isfile(stub):
                os.symlink(stub, os.path.join(work, "libcuda.so.1"))
                env["LD_LIBRARY_PATH"] = work + ":" + env.get("LD_LIBRARY_PATH", "")
                break
        proc = subprocess.run([str(python), "-W", "ignore", str(REPO / "scripts/sglang_prefill_adder.py")],
                              input=json.dumps(states), capture_output=True, text=True, cwd=work,
                              env=env, timeout=600)
    if proc.returncode != 0:
        if "ImportError" in proc.stderr or "ModuleNotFoundError" in proc.stderr:
            pytest.skip("SGLang 0.5.6 is not importable: " + proc.stderr.strip().splitlines()[-1])
        raise AssertionError(proc.stderr[-3000:])
    return json.loads(proc.stdout)


def test_feather_admits_what_sglang_prefill_adder_admits():
    rng = random.Random(16)
    states = [_random_state(rng) for _ in range(400)]
    expected = _sglang_admissions(states)
    mismatches = []
    for state, (admitted, chunked) in zip(states, expected):
        got = core.sglang_prefill_admit(
            state["page_size"], state["new_token_ratio"], state["available_tokens"],
            state["rem_input_tokens"], state["rem_chunk_tokens"], state["max_running_requests"],
            state["running_remaining"], state["waiting"])
        if (list(got[0]), got[1]) != (admitted, chunked):
            mismatches.append((state, (admitted, chunked), got))
    # The random states must exercise the interesting cases, or the comparison says little.
    sizes = [len(a) for a, _ in expected]
    assert sum(1 for n in sizes if n == 0) > 10 and sum(1 for n in sizes if n >= 3) > 10
    assert sum(1 for _, c in expected if c >= 0) > 10
    assert not mismatches, f"{len(mismatches)} of {len(states)} differ; first: {mismatches[0]}"
