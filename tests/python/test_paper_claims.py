"""Tests of scripts/paper_claims.py: claims-file parsing and its errors, expressions, verdicts, and
a golden table (no simulator runs; fast)."""

from __future__ import annotations

import pathlib
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import yaml  # noqa: E402,F401  (pinned in python/requirements-dev.txt; paper_claims needs it)
import paper_claims as pc  # noqa: E402

HEADER = textwrap.dedent("""\
    version: 1
    schedulers:
      fcfs: {scheduler.selector: fcfs, scheduler.stop: always}
      feather: {scheduler.selector: cht, scheduler.stop: bandit}
    runs:
      a: {scenario: scenarios/default.yaml, scheduler: feather}
      b: {scenario: scenarios/default.yaml, scheduler: fcfs, set: {workload.requests: 10}}
    claims:
    """)

RATIO = textwrap.dedent("""\
      - id: r.one
        section: "§5"
        group: held-out
        tex_line: 509
        quote: "roughly 4x"
        kind: ratio
        value: a.throughput_tok_s / b.throughput_tok_s
        paper: 4.0
    """)


def parse(body: str) -> pc.ClaimsFile:
    return pc.parse_claims(HEADER + body, "c.yaml", REPO)


def problems(body: str, header: str = HEADER) -> list[str]:
    with pytest.raises(pc.ClaimsError) as e:
        pc.parse_claims(header + body, "c.yaml", REPO)
    return e.value.problems


def test_parses_runs_schedulers_and_claims():
    cf = parse(RATIO)
    assert cf.tolerance == 0.25
    assert cf.runs["a"].sets == {"scheduler.selector": "cht", "scheduler.stop": "bandit"}
    assert cf.runs["b"].sets["workload.requests"] == 10
    (c,) = cf.claims
    assert (c.id, c.kind, c.paper, c.runs) == ("r.one", "ratio", 4.0, ["a", "b"])


def test_families_expand_to_named_runs_in_order():
    body = textwrap.dedent("""\
        families:
          fam:
            scenario: scenarios/default.yaml
            set: {workload.requests: 100}
            vary:
              scheduler: [fcfs, feather]
              f: {key: workload.sharing.shared_fraction, values: [0, 0.5]}
        """)
    header = HEADER.replace("claims:\n", body + "claims:\n")
    cf = pc.parse_claims(header + RATIO, "c.yaml", REPO)
    assert list(cf.families["fam"].points)[1] == ({"scheduler": "fcfs", "f": 0.5}, "fam_fcfs_0p5")
    r = cf.runs["fam_feather_0"]
    assert r.sets == {"scheduler.selector": "cht", "scheduler.stop": "bandit",
                      "workload.requests": 100, "workload.sharing.shared_fraction": 0}


def test_feather_stop_replaces_the_bandit_of_the_feather_aliases_only():
    header = HEADER.replace(
        "claims:\n", "  c: {scenario: scenarios/default.yaml, scheduler: radix_rl}\nclaims:\n").replace(
        "  feather: {scheduler.selector: cht, scheduler.stop: bandit}\n",
        "  feather: {scheduler.selector: cht, scheduler.stop: bandit,"
        " scheduler.cht_retain_cached: false}\n"
        "  feather_norl: {scheduler.selector: cht, scheduler.stop: always}\n"
        "  radix_rl: {scheduler.selector: lpm, scheduler.stop: bandit}\n")
    cf = pc.parse_claims(header + RATIO, "c.yaml", REPO, feather_stop="converge")
    assert cf.runs["a"].sets == {"scheduler.selector": "cht", "scheduler.stop": "converge"}
    assert cf.runs["b"].sets["scheduler.stop"] == "always"
    assert cf.runs["c"].sets["scheduler.stop"] == "bandit"  # not a feather alias
    plain = pc.parse_claims(header + RATIO, "c.yaml", REPO).runs["a"].sets
    assert plain == {"scheduler.selector": "cht", "scheduler.stop": "bandit",
                     "scheduler.cht_retain_cached": False}


def test_feather_stop_needs_its_own_output_dir(capsys):
    assert pc.main(["--feather-stop", "converge", "--build", str(REPO / "build" / "release")]) == 2
    assert "its own --out" in capsys.readouterr().err


def test_identical_specs_share_a_run_id():
    body = HEADER.replace("claims:\n", "") + textwrap.dedent("""\
          c: {scenario: scenarios/default.yaml, set: {scheduler.stop: bandit, scheduler.selector: cht}}
        claims:
        """) + RATIO
    cf = pc.parse_claims(body, "c.yaml", REPO)
    assert cf.runs["a"].run_id() == cf.runs["c"].run_id()
    assert cf.runs["a"].run_id() != cf.runs["b"].run_id()
    # A key the binary does not know, dropped, no longer tells two runs apart.
    cf.runs["c"].sets["serving.engine"] = "sglang"
    assert cf.runs["a"].run_id() != cf.runs["c"].run_id()
    assert cf.runs["a"].run_id({"serving.engine"}) == cf.runs["c"].run_id({"serving.engine"})


@pytest.mark.parametrize("bad, line, where, what", [
    (RATIO.replace("kind: ratio", "kind: ratioo"), 14, "claims[0].kind", "must be one of"),
    (RATIO.replace("paper: 4.0", "paper: four"), 16, "claims[0].paper", "the paper's number"),
    (RATIO.replace("a.throughput_tok_s /", "zz.throughput_tok_s /"), 15, "claims[0].value",
     "unknown run 'zz'"),
    (RATIO.replace("a.throughput_tok_s /", "__import__('os').x /"), 15, "claims[0].value",
     "bad expression"),
    (RATIO.replace("group: held-out", "group: maybe"), 11, "claims[0].group", "must be one of"),
    (RATIO.replace("tex_line: 509", "tex_line: -3"), 12, "claims[0].tex_line", ">= 1"),
    (RATIO.replace("  paper: 4.0\n", "  paper: 4.0\n  colour: red\n"), 17,
     "claims[0].colour", "unknown key"),
])
def test_bad_claims_name_file_line_and_field(bad, line, where, what):
    (p,) = problems(bad)
    assert p.startswith(f"c.yaml:{line}: {where}: "), p
    assert what in p


def test_every_problem_is_reported_at_once():
    bad = RATIO.replace("kind: ratio", "kind: ordering") + RATIO.replace("r.one", "r.one")
    ps = problems(bad)
    assert any("claims[0].checks" in p for p in ps)
    assert any("claims[1].id: duplicate claim id" in p for p in ps)


def test_unknown_scheduler_alias_and_missing_scenario():
    header = HEADER.replace("scheduler: fcfs, set:", "scheduler: fifo, set:").replace(
        "scenarios/default.yaml, scheduler: feather", "scenarios/nope.yaml, scheduler: feather")
    ps = problems(RATIO, header)
    assert "c.yaml:6: runs.a.scenario: no such file: scenarios/nope.yaml" in ps
    assert any(p.startswith("c.yaml:7: runs.b.scheduler: unknown scheduler alias 'fifo'")
               for p in ps)


def test_invalid_yaml_names_the_line():
    (p,) = problems("  - id: [unclosed\n")
    assert p.startswith("c.yaml:10: (file): not valid YAML")


def test_cli_exits_2_on_bad_file(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text(HEADER + RATIO.replace("kind: ratio", "kind: nope"))
    assert pc.main(["--claims", str(f), "--check"]) == 2
    assert f"{f}:14: claims[0].kind: must be one of" in capsys.readouterr().err


def test_cli_refuses_an_output_dir_it_did_not_create(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("x")
    assert pc.main(["--out", str(out), "--build", str(REPO / "build" / "release")]) == 2
    err = capsys.readouterr().err
    assert "refusing to overwrite" in err or "not found" in err
    assert (out / "precious.txt").read_text() == "x"


def results(**runs: dict) -> dict[str, pc.RunResult]:
    return {n: pc.RunResult(n, None, s) for n, s in runs.items()}


def test_expressions_fields_functions_and_derived_share():
    r = results(a={"throughput_tok_s": 300.0, "scheduler_cpu_s": 1.0, "duration_s": 4.0,
                   "step_time_s_by_term": {"gemm": 2.5}},
                b={"throughput_tok_s": 100.0, "ops": {"x": {"calls": 7}}})
    assert pc.evaluate("a.throughput_tok_s / b.throughput_tok_s", r) == 3.0
    assert pc.evaluate("max(a.throughput_tok_s, 2 * b.throughput_tok_s) - 1", r) == 299.0
    assert pc.evaluate("a.sched_share", r) == 0.25
    assert pc.evaluate("a.term_gemm", r) == 2.5
    assert pc.evaluate('bench(b, "ops.x.calls")', r) == 7.0
    with pytest.raises(ValueError, match="no field"):
        pc.evaluate("a.nope", r)
    with pytest.raises(ValueError, match="division by zero"):
        pc.evaluate("a.throughput_tok_s / 0", r)


def claim(kind: str, paper: float | None = None, op: str = "") -> pc.Claim:
    return pc.Claim("x", "§5", "held-out", 1, "q", kind, [], paper=paper, op=op)


@pytest.mark.parametrize("kind, paper, value, want", [
    ("ratio", 4.0, 3.0, "agree"),        # 0.75 of the paper's: the edge
    ("ratio", 4.0, 2.9, "partly"),       # right direction, too small
    ("ratio", 4.0, 5.0, "agree"),
    ("ratio", 4.0, 5.1, "partly"),
    ("ratio", 4.0, 0.9, "disagree"),     # wrong direction
    ("ratio", 1.0, 1.2, "agree"),
    ("ratio", 1.0, 1.3, "disagree"),     # "similar" has no partly
    ("ratio", 0.5, 0.9, "partly"),
    ("ratio", 0.5, 1.1, "disagree"),
    ("value", 3800, 2900, "agree"),
    ("value", 3800, 2000, "partly"),
    ("value", 3800, 1800, "disagree"),
])
def test_ratio_and_value_verdicts(kind, paper, value, want):
    assert pc.verdict(claim(kind, paper), value, None, 0.25) == want


def test_threshold_and_ordering_verdicts():
    assert pc.verdict(claim("threshold", 1.25, ">="), 1.25, None, 0.25) == "agree"
    assert pc.verdict(claim("threshold", 1.25, ">="), 1.2, None, 0.25) == "disagree"
    assert pc.verdict(claim("threshold", 0.01, "<"), 0.02, None, 0.25) == "disagree"
    assert pc.verdict(claim("ordering"), None, [True, True, True], 0.25) == "agree"
    assert pc.verdict(claim("ordering"), None, [True, False], 0.25) == "partly"
    assert pc.verdict(claim("ordering"), None, [True, False, False], 0.25) == "disagree"
    assert pc.verdict(claim("not-checkable"), None, None, 0.25) == "not checkable"


GOLDEN_MD = """\
Every `feather run` below also has `--set scheduler_time=engine` unless it sets the key itself.

| id | section | claim (paper .tex line) | setting: run name and command | paper | feather | verdict | note |
| --- | --- | --- | --- | ---: | --- | --- | --- |
| r.one | §5 (held-out) | roughly 4x (l. 509) | a: feather run scenarios/default.yaml --set scheduler.selector=cht --set scheduler.stop=bandit --set serving.engine=sglang; b: feather run scenarios/default.yaml --set scheduler_time=zero --set scheduler.selector=fcfs --set scheduler.stop=always --set workload.requests=10 | 4x | 2.48x | partly | ran without serving.engine=sglang (this binary does not know the key) |
| o.one | §3 (fitting) | x \\| y (l. 7) | a: feather run scenarios/default.yaml --set scheduler.selector=cht --set scheduler.stop=bandit --set serving.engine=sglang; b: feather run scenarios/default.yaml --set scheduler_time=zero --set scheduler.selector=fcfs --set scheduler.stop=always --set workload.requests=10 | - | 1/2 hold: 248 > 100 yes; 100 > 248 NO | partly | a note; ran without serving.engine=sglang (this binary does not know the key) |
| n.one | §5 (held-out) | a \\| b (l. 3) | no counter | - | - | not checkable |  |
"""

GOLDEN_CSV = """\
id,section,group,tex_line,claim,setting,command,paper,feather,verdict,note
r.one,§5,held-out,509,roughly 4x,a: feather run scenarios/default.yaml --set scheduler.selector=cht --set scheduler.stop=bandit --set serving.engine=sglang; b: feather run scenarios/default.yaml --set scheduler_time=zero --set scheduler.selector=fcfs --set scheduler.stop=always --set workload.requests=10,feather run scenarios/default.yaml --set scheduler_time=engine --set scheduler.selector=cht --set scheduler.stop=bandit --set serving.engine=sglang ; feather run scenarios/default.yaml --set scheduler_time=zero --set scheduler.selector=fcfs --set scheduler.stop=always --set workload.requests=10,4x,2.48x,partly,ran without serving.engine=sglang (this binary does not know the key)
o.one,§3,fitting,7,x | y,a: feather run scenarios/default.yaml --set scheduler.selector=cht --set scheduler.stop=bandit --set serving.engine=sglang; b: feather run scenarios/default.yaml --set scheduler_time=zero --set scheduler.selector=fcfs --set scheduler.stop=always --set workload.requests=10,feather run scenarios/default.yaml --set scheduler_time=engine --set scheduler.selector=cht --set scheduler.stop=bandit --set serving.engine=sglang ; feather run scenarios/default.yaml --set scheduler_time=zero --set scheduler.selector=fcfs --set scheduler.stop=always --set workload.requests=10,-,1/2 hold: 248 > 100 yes; 100 > 248 NO,partly,a note; ran without serving.engine=sglang (this binary does not know the key)
n.one,§5,held-out,3,a | b,no counter,,-,,not checkable,
"""

GOLDEN_SUMMARY = """\
| group | checked | agree | partly | disagree | agree % | not run | not checkable |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| fitting | 1 | 0 | 1 | 0 | 0 % | 0 | 0 |
| held-out | 1 | 0 | 1 | 0 | 0 % | 0 | 1 |
| all | 2 | 0 | 2 | 0 | 0 % | 0 | 1 |
"""


def test_golden_table_format():
    header = HEADER.replace("version: 1\n", "version: 1\ndefaults: {set: {scheduler_time: engine}}\n"
                            ).replace("set: {workload.requests: 10}",
                                      "set: {scheduler_time: zero, workload.requests: 10}")
    cf = pc.parse_claims(header + RATIO + textwrap.dedent("""\
          - id: o.one
            section: "§3"
            group: fitting
            tex_line: 7
            quote: "x | y"
            kind: ordering
            checks: [a.throughput_tok_s > b.throughput_tok_s, b.throughput_tok_s > a.throughput_tok_s]
            note: a note
          - id: n.one
            section: "§5"
            group: held-out
            tex_line: 3
            quote: "a | b"
            kind: not-checkable
            reason: no counter
        """), "c.yaml", REPO)
    cf.runs["a"].sets["serving.engine"] = "sglang"
    r = results(a={"throughput_tok_s": 248.0}, b={"throughput_tok_s": 100.0})
    rows = pc.build_rows(cf, r, {}, {"serving.engine"})
    assert pc.render_table_md(rows, cf) == GOLDEN_MD
    assert pc.render_table_csv(rows, cf) == GOLDEN_CSV
    assert pc.render_summary_md(rows) == GOLDEN_SUMMARY


def test_a_claim_whose_run_failed_is_not_run():
    cf = parse(RATIO)
    rows = pc.build_rows(cf, results(a={"throughput_tok_s": 1.0}), {"b": "exit 2: bad key"})
    assert rows[0].verdict == "not run"
    assert "b: exit 2: bad key" in rows[0].error


def test_the_shipped_claims_file_is_valid():
    path = REPO / "scripts" / "paper_claims.yaml"
    cf = pc.parse_claims(path.read_text(encoding="utf-8"), str(path), REPO)
    held_out = [c for c in cf.claims if c.group == "held-out" and c.kind != "not-checkable"]
    fitting = [c for c in cf.claims if c.group == "fitting" and c.kind != "not-checkable"]
    assert len(held_out) >= 40 and len(fitting) >= 20
    tex = (REPO.parent / "shared" / "paper" / "feather-paper.tex")
    if tex.is_file():  # every cited line exists in the paper
        n = len(tex.read_text(encoding="utf-8").splitlines())
        assert all(1 <= c.tex_line <= n for c in cf.claims)


def test_moved_lists_changed_verdicts_only():
    old = {"verdicts": {"a": "agree", "b": "partly", "gone": "agree"},
           "feather": {"a": "1x", "b": "2.5x"}, "git_rev": "r1", "binary_sha256_12": "s1"}
    new = {"verdicts": {"a": "agree", "b": "agree", "c": "disagree"},
           "feather": {"a": "1x", "b": "3.9x", "c": "0/1 hold: 1 < 2 NO"}, "git_rev": "r2",
           "binary_sha256_12": "s2"}
    text = pc.render_moved(old, new)
    assert "| b | partly | agree | 2.5x | 3.9x |" in text
    assert "| c | (new claim) | disagree |" in text
    assert "| gone | agree | (claim removed) |" in text
    assert "| a |" not in text
    assert "No verdict changed." in pc.render_moved(new, new)


def test_optional_key_probe_passes_values_as_the_runs_do(tmp_path):
    # A boolean reaches the binary as `true`, as execute() writes it, not as Python's `True`: a
    # binary that knows the key is not mistaken for one that does not.
    header = HEADER.replace(
        "runs:\n",
        "optional_keys: [serving.warm_prefix_cache]\nruns:\n"
        "  w: {scenario: scenarios/default.yaml, scheduler: fcfs,"
        " set: {serving.warm_prefix_cache: true}}\n")
    cf = pc.parse_claims(header + RATIO, "c.yaml", REPO)
    fake = tmp_path / "feather"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do\n'
                    '  [ "$a" = "serving.warm_prefix_cache=true" ] && exit 0\ndone\nexit 2\n')
    fake.chmod(0o755)
    assert pc.probe_optional(fake, REPO, cf, tmp_path) == {"serving.warm_prefix_cache": True}
