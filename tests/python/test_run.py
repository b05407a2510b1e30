"""feather.run against the CLI, feather.read_results, and the run's error paths."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import feather

SMALL = {"workload.requests": 300, "scheduler_time": "zero", "name": "py-small"}


def test_run_matches_the_cli(tmp_path, feather_binary):
    summary = feather.run(None, SMALL, out=tmp_path / "py")
    cli = subprocess.run(
        [str(feather_binary), "run", "--out", str(tmp_path / "cli"), "--json"]
        + [arg for key, value in SMALL.items() for arg in ("--set", f"{key}={value}")],
        check=True, capture_output=True, text=True)
    cli_bytes = (tmp_path / "cli" / "summary.json").read_bytes()
    cli_summary = json.loads(cli_bytes)
    assert json.loads(cli.stdout) == cli_summary
    assert summary["requests_finished"] == 300
    if summary["provenance"]["git_rev"] == cli_summary["provenance"]["git_rev"]:
        # One build (scripts/test.sh): the same bytes, summary and results.
        assert (tmp_path / "py" / "summary.json").read_bytes() == cli_bytes
        assert summary == cli_summary
        assert ((tmp_path / "py" / "results.h5").read_bytes()
                == (tmp_path / "cli" / "results.h5").read_bytes())
    else:
        # An installed package against another build's CLI: the same run, another git_rev.
        for s in (summary, cli_summary):
            del s["provenance"]["git_rev"]
        assert summary == cli_summary
        py, ref = (feather.read_results(tmp_path / d) for d in ("py", "cli"))
        for table in ("requests", "steps", "step_terms"):
            for key, column in getattr(ref, table).items():
                assert np.array_equal(getattr(py, table)[key], column), (table, key)


def test_read_results(tmp_path, repo_root):
    summary = feather.run(repo_root / "scenarios" / "default.yaml",
                          ["workload.requests=120", "scheduler_time=zero"], out=tmp_path)
    results = feather.read_results(tmp_path)
    assert len(results.requests["arrival_ns"]) == 120
    assert results.requests["arrival_ns"].dtype == np.int64
    assert len(results.steps["step_ns"]) == summary["steps"]
    assert set(results.step_terms) >= {"gemm", "decode_attention", "overhead"}
    assert results.meta["format_version"] == 1
    assert results.meta["scenario"]["name"] == "default"
    assert results.meta["selector"] == "cht"
    same = feather.read_results(tmp_path / "results.h5")
    assert np.array_equal(same.steps["batch_size"], results.steps["batch_size"])


def test_bad_input_raises(tmp_path):
    with pytest.raises(feather.InputError, match="workload.requestz"):
        feather.run(None, {"workload.requestz": 5}, out=tmp_path / "a")
    with pytest.raises(feather.InputError, match="no_such.yaml"):
        feather.run(tmp_path / "no_such.yaml", out=tmp_path / "b")
    with pytest.raises(TypeError):
        feather.run(None, "workload.requests=5")
    with pytest.raises(TypeError):
        feather.run(None, {"workload.requests": [1, 2]})
    with pytest.raises(TypeError):
        feather.run(42)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="foreign"):
        feather.run(None, SMALL, out=foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    (tmp_path / "bad.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match="bad.h5"):
        feather.read_results(tmp_path / "bad.h5")
    with pytest.raises(FileNotFoundError):
        feather.read_results(tmp_path / "none.h5")


def test_unserved_requests_raise_with_the_outputs(tmp_path):
    with pytest.raises(feather.UnservedError) as caught:
        feather.run(None, dict(SMALL, **{"serving.kv_cache_blocks": 100}), out=tmp_path)
    assert caught.value.summary["requests_unservable"] == 300
    assert caught.value.out_dir == str(tmp_path)
    assert (tmp_path / "summary.json").exists()


def test_sigint_stops_a_run_and_raises_keyboard_interrupt(tmp_path):
    """Ctrl-C in a run: KeyboardInterrupt, nothing written, Python's own handler back after."""
    child = textwrap.dedent(f"""
        import os, signal, threading, time
        import feather
        # Python keeps SIGINT ignored when it starts with it ignored (a job started with `&` by
        # a non-interactive shell, as some CI runners do): install its own handler, the one
        # feather.run must give back.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            feather.run(None, {{"scheduler_time": "zero"}}, out={str(tmp_path / "out")!r})
        except KeyboardInterrupt as error:
            print("stopped:", error)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            print("handler restored")
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "stopped: feather run interrupted (exit code 130); nothing written" in done.stdout
    assert "handler restored" in done.stdout
    assert not (tmp_path / "out").exists()
