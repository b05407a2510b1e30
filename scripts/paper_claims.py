#!/usr/bin/env python3
"""paper_claims.py: the paper's quantitative claims as a rerunnable check.

Reads a claims file (scripts/paper_claims.yaml; its schema is in results/paper-claims/README.md),
runs every feather run the claims need once (identical runs shared, `--jobs` at a time), computes
feather's value of each claim, compares it with the paper's and writes

    OUT/table.md, OUT/table.csv   one row per claim: id, section, group, setting, command,
                                  paper value, feather value, verdict
    OUT/summary.md, summary.json  agree / partly / disagree per group (fitting = §3 and appendix
                                  A/B, the cost model's fitting data; held-out = §5 and appendix D)
    OUT/figures/*.png             feather's curve of each run family that declares a figure
    OUT/provenance.json           binary, git revision, host, date, wall time

Verdicts (tolerance t, 0.25 unless the file says otherwise):
  ratio      agree if feather/paper is in [1-t, 1+t]; partly if not, but feather's ratio lies on
             the same side of 1 as the paper's (the direction holds, the size does not);
             disagree otherwise. A paper value of 1 ("similar") has no partly.
  value      an absolute number: agree within [1-t, 1+t] of the paper's, partly within [1-2t, 1+2t].
  threshold  agree if `value OP bound` holds, disagree otherwise.
  ordering   a list of comparisons: agree if all hold, partly if at least half do, else disagree.
  not-checkable  listed with the reason, never counted.
A claim whose runs failed gets `not run` (counted apart, with the error).

Bad claims-file input: one message per problem, `FILE:LINE: FIELD: message`, exit 2, nothing run.
The output directory is written to a temporary sibling and renamed into place; an existing
directory is replaced only if this script created it (it holds the marker file
`.paper-claims`), otherwise the script refuses (exit 2).
"""
from __future__ import annotations

import argparse
import ast
import concurrent.futures
import csv
import datetime
import hashlib
import io
import json
import math
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

MARKER = ".paper-claims"
KINDS = ("ratio", "value", "threshold", "ordering", "not-checkable")
GROUPS = ("fitting", "held-out")
OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
       ">=": lambda a, b: a >= b}
SCHEDULER_KEY = "scheduler"  # a vary/run key naming a scheduler alias


class ClaimsError(Exception):
    """Problems of a claims file: a list of `FILE:LINE: FIELD: message` strings."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


# ---------------------------------------------------------------------------------------------
# Loading with line numbers: PyYAML's composer keeps each node's start mark; we convert the node
# tree to plain Python values and a side table path -> line.


def _to_python(node: yaml.Node, path: str, lines: dict[str, int], fname: str,
               problems: list[str]) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for k, v in node.value:
            key = str(yaml.safe_load(yaml.serialize(k))) if not isinstance(k, yaml.ScalarNode) \
                else k.value
            sub = f"{path}.{key}" if path else key
            if key in out:
                problems.append(f"{fname}:{k.start_mark.line + 1}: {sub}: duplicate key")
            if key == "<<":
                problems.append(f"{fname}:{k.start_mark.line + 1}: {sub}: merge keys are not "
                                "supported; write the keys out")
            out[key] = _to_python(v, sub, lines, fname, problems)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, f"{path}[{i}]", lines, fname, problems)
                for i, v in enumerate(node.value)]
    # Scalars: resolve with the safe loader's constructor (ints, floats, bools, strings, null).
    return yaml.safe_load(yaml.serialize(node))


def load_yaml_with_lines(text: str, fname: str) -> tuple[Any, dict[str, int]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 0
        raise ClaimsError([f"{fname}:{line}: (file): not valid YAML: "
                           f"{getattr(e, 'problem', None) or e}"]) from None
    if node is None:
        raise ClaimsError([f"{fname}:1: (file): empty claims file"])
    lines: dict[str, int] = {}
    problems: list[str] = []
    data = _to_python(node, "", lines, fname, problems)
    if problems:
        raise ClaimsError(problems)
    return data, lines


# ---------------------------------------------------------------------------------------------
# The model of a claims file.


@dataclass
class RunSpec:
    name: str
    kind: str                      # "run" | "bench"
    scenario: str = ""             # repository-relative path (run)
    sets: dict[str, Any] = field(default_factory=dict)   # merged overrides, in order
    bench: str = ""                # bench subcommand (bench)
    args: list[str] = field(default_factory=list)
    note: str = ""
    family: str = ""

    def key(self, dropped: set[str] | frozenset[str] = frozenset()) -> str:
        sets = sorted(((k, v) for k, v in self.sets.items() if k not in dropped),
                      key=lambda x: x[0])
        return json.dumps([self.kind, self.scenario, sets, self.bench, self.args],
                          sort_keys=True, default=str)

    def run_id(self, dropped: set[str] | frozenset[str] = frozenset()) -> str:
        """Identical runs (after the keys the binary does not know are dropped) share an id."""
        return hashlib.sha256(self.key(dropped).encode()).hexdigest()[:16]


@dataclass
class Family:
    name: str
    figure: dict[str, Any] | None
    points: list[tuple[dict[str, Any], str]]   # (axis alias -> value, run name)
    axes: list[str]


@dataclass
class Claim:
    id: str
    section: str
    group: str
    tex_line: int
    quote: str
    kind: str
    runs: list[str]
    value: str = ""
    paper: float | None = None
    paper_text: str = ""
    op: str = ""
    checks: list[str] = field(default_factory=list)
    reason: str = ""
    note: str = ""
    line: int = 0


@dataclass
class ClaimsFile:
    path: str
    tolerance: float
    runs: dict[str, RunSpec]
    families: dict[str, Family]
    claims: list[Claim]
    optional_keys: list[str]
    schedulers: dict[str, dict[str, Any]]
    defaults: dict[str, Any] = field(default_factory=dict)   # `defaults.set`: every run's base


def _fmt_token(v: Any) -> str:
    s = str(v)
    s = s.replace(".", "p").replace("-", "_").replace("/", "_")
    return re.sub(r"[^A-Za-z0-9_]", "", s)


_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _expr_names(expr: str) -> set[str]:
    tree = ast.parse(expr, mode="eval")
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id not in FUNCS:
            names.add(n.id)
    return names


def parse_claims(text: str, fname: str, repo: pathlib.Path | None = None,
                 feather_stop: str | None = None) -> ClaimsFile:
    """Validates a claims file; raises ClaimsError listing every problem with file:line: field.

    feather_stop: Feather as the binary ships it, with this stop policy (e.g. its default,
    `converge`): the `feather*` aliases that name the bandit (Feather as the paper ran it) get
    it, and every `feather*` alias drops `scheduler.cht_retain_cached` (the paper's working set)
    so the binary's default applies; None keeps the file's."""
    data, lines = load_yaml_with_lines(text, fname)
    problems: list[str] = []

    def err(path: str, msg: str) -> None:
        # The line of the field, else of the nearest enclosing one.
        p = path
        while p and p not in lines:
            p = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", p)
        problems.append(f"{fname}:{lines.get(p, 1)}: {path}: {msg}")

    if not isinstance(data, dict):
        raise ClaimsError([f"{fname}:1: (file): the top level must be a mapping"])
    known_top = {"version", "tolerance", "defaults", "optional_keys", "schedulers", "families",
                 "runs", "claims"}
    for k in data:
        if k not in known_top:
            err(k, f"unknown key (expected one of {', '.join(sorted(known_top))})")
    if data.get("version") != 1:
        err("version", "must be 1")
    tol = data.get("tolerance", 0.25)
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not 0 < tol < 1:
        err("tolerance", f"must be a number in (0, 1), got {tol!r}")
        tol = 0.25
    defaults = data.get("defaults", {}) or {}
    if not isinstance(defaults, dict) or not isinstance(defaults.get("set", {}), dict):
        err("defaults", "must be a mapping with a `set` mapping")
        defaults = {}
    default_sets = dict(defaults.get("set", {}) or {})
    optional_keys = data.get("optional_keys", []) or []
    if not isinstance(optional_keys, list) or not all(isinstance(k, str) for k in optional_keys):
        err("optional_keys", "must be a list of scenario keys")
        optional_keys = []
    scheds = data.get("schedulers", {}) or {}
    if not isinstance(scheds, dict) or not all(isinstance(v, dict) for v in scheds.values()):
        err("schedulers", "must map an alias to a mapping of scenario keys")
        scheds = {}
    if feather_stop is not None:
        def shipped(alias: str, keys: dict[str, Any]) -> dict[str, Any]:
            if not alias.startswith("feather"):
                return keys
            keys = {k: v for k, v in keys.items() if k != "scheduler.cht_retain_cached"}
            if keys.get("scheduler.stop") == "bandit":
                keys["scheduler.stop"] = feather_stop
            return keys
        scheds = {alias: shipped(alias, keys) for alias, keys in scheds.items()}

    runs: dict[str, RunSpec] = {}
    families: dict[str, Family] = {}

    def make_run(name: str, spec: Any, path: str, family: str = "") -> RunSpec | None:
        if not _NAME_RE.match(name):
            err(path, f"run name {name!r} must be an identifier (letters, digits, _)")
            return None
        if name in runs:
            err(path, f"run name {name!r} defined twice")
            return None
        if not isinstance(spec, dict):
            err(path, "must be a mapping")
            return None
        if "bench" in spec:
            for k in spec:
                if k not in ("bench", "args", "note"):
                    err(f"{path}.{k}", "unknown key for a bench run (bench, args, note)")
            args = spec.get("args", []) or []
            if not isinstance(args, list):
                err(f"{path}.args", "must be a list of strings")
                args = []
            return RunSpec(name, "bench", bench=str(spec["bench"]), args=[str(a) for a in args],
                           note=str(spec.get("note", "")), family=family)
        for k in spec:
            if k not in ("scenario", "scheduler", "set", "note"):
                err(f"{path}.{k}", "unknown key (scenario, scheduler, set, note)")
        scen = spec.get("scenario")
        if not isinstance(scen, str) or not scen:
            err(f"{path}.scenario", "required: a scenario file (repository-relative)")
            return None
        if repo is not None and not (repo / scen).is_file():
            err(f"{path}.scenario", f"no such file: {scen}")
        sets = dict(default_sets)
        alias = spec.get("scheduler")
        if alias is not None:
            if alias not in scheds:
                err(f"{path}.scheduler", f"unknown scheduler alias {alias!r} "
                    f"(known: {', '.join(sorted(scheds))})")
            else:
                sets.update(scheds[alias])
        extra = spec.get("set", {}) or {}
        if not isinstance(extra, dict):
            err(f"{path}.set", "must be a mapping of scenario keys to values")
            extra = {}
        sets.update(extra)
        return RunSpec(name, "run", scenario=scen, sets=sets, note=str(spec.get("note", "")),
                       family=family)

    fams = data.get("families", {}) or {}
    if not isinstance(fams, dict):
        err("families", "must be a mapping")
        fams = {}
    for fname_, fam in fams.items():
        fpath = f"families.{fname_}"
        if not isinstance(fam, dict):
            err(fpath, "must be a mapping")
            continue
        for k in fam:
            if k not in ("scenario", "scheduler", "set", "note", "vary", "figure"):
                err(f"{fpath}.{k}", "unknown key (scenario, scheduler, set, note, vary, figure)")
        vary = fam.get("vary")
        if not isinstance(vary, dict) or not vary:
            err(f"{fpath}.vary", "required: a mapping alias -> {key, values} or scheduler -> "
                "list of aliases")
            continue
        axes: list[tuple[str, str, list[Any]]] = []
        for alias, ax in vary.items():
            apath = f"{fpath}.vary.{alias}"
            if alias == SCHEDULER_KEY:
                if not isinstance(ax, list) or not ax:
                    err(apath, "must be a non-empty list of scheduler aliases")
                    continue
                axes.append((alias, SCHEDULER_KEY, ax))
            else:
                if not isinstance(ax, dict) or "key" not in ax or not isinstance(
                        ax.get("values"), list) or not ax["values"]:
                    err(apath, "must be {key: SCENARIO_KEY, values: [...]}")
                    continue
                axes.append((alias, str(ax["key"]), ax["values"]))
        base = {k: fam[k] for k in ("scenario", "set", "note") if k in fam}
        points: list[tuple[dict[str, Any], str]] = []
        combos: list[dict[str, Any]] = [{}]
        for alias, _, values in axes:
            combos = [{**c, alias: v} for c in combos for v in values]
        for combo in combos:
            spec = dict(base)
            spec["set"] = dict(base.get("set", {}) or {})
            name = fname_
            for alias, key, _ in axes:
                v = combo[alias]
                if key == SCHEDULER_KEY:
                    spec["scheduler"] = v
                else:
                    spec["set"][key] = v
                name += "_" + _fmt_token(v)
            if "scheduler" not in spec and "scheduler" in fam:
                spec["scheduler"] = fam["scheduler"]
            r = make_run(name, spec, fpath, family=fname_)
            if r:
                runs[name] = r
                points.append((combo, name))
        fig = fam.get("figure")
        if fig is not None and (not isinstance(fig, dict) or "x" not in fig or "y" not in fig):
            err(f"{fpath}.figure", "must be {x: AXIS_ALIAS, y: FIELD, title, lines?}")
            fig = None
        if fig is not None and fig["x"] not in [a for a, _, _ in axes]:
            err(f"{fpath}.figure.x", f"{fig['x']!r} is not an axis of this family")
            fig = None
        if fig is not None and not all(isinstance(m, list) and len(m) == 3
                                       for m in fig.get("paper", []) or []):
            err(f"{fpath}.figure.paper", "must be a list of [x, y, label]")
            fig = None
        families[fname_] = Family(fname_, fig, points, [a for a, _, _ in axes])

    single = data.get("runs", {}) or {}
    if not isinstance(single, dict):
        err("runs", "must be a mapping name -> run")
        single = {}
    for name, spec in single.items():
        r = make_run(name, spec, f"runs.{name}")
        if r:
            runs[name] = r

    claims: list[Claim] = []
    raw = data.get("claims")
    if not isinstance(raw, list) or not raw:
        err("claims", "required: a non-empty list of claims")
        raw = []
    seen: set[str] = set()
    for i, c in enumerate(raw):
        cp = f"claims[{i}]"
        if not isinstance(c, dict):
            err(cp, "must be a mapping")
            continue
        allowed = {"id", "section", "group", "tex_line", "quote", "kind", "value", "paper",
                   "paper_text", "op", "checks", "reason", "note"}
        for k in c:
            if k not in allowed:
                err(f"{cp}.{k}", f"unknown key (expected one of {', '.join(sorted(allowed))})")
        cid = c.get("id")
        if not isinstance(cid, str) or not re.match(r"^[a-z0-9][a-z0-9.-]*$", cid or ""):
            err(f"{cp}.id", "required: lower-case letters, digits, '.', '-'")
            cid = f"#{i}"
        elif cid in seen:
            err(f"{cp}.id", f"duplicate claim id {cid!r}")
        seen.add(cid)
        for k in ("section", "quote"):
            if not isinstance(c.get(k), str) or not c.get(k):
                err(f"{cp}.{k}", "required: a string")
        if c.get("group") not in GROUPS:
            err(f"{cp}.group", f"must be one of {', '.join(GROUPS)}, got {c.get('group')!r}")
        tl = c.get("tex_line")
        if not isinstance(tl, int) or isinstance(tl, bool) or tl < 1:
            err(f"{cp}.tex_line", "required: the line of the claim in the paper's .tex (>= 1)")
            tl = 0
        kind = c.get("kind")
        if kind not in KINDS:
            err(f"{cp}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
            continue
        claim = Claim(cid, str(c.get("section", "")), str(c.get("group", "")), tl,
                      str(c.get("quote", "")), kind, [], note=str(c.get("note", "") or ""),
                      line=lines.get(cp, 0), paper_text=str(c.get("paper_text", "") or ""))
        exprs: list[tuple[str, str]] = []
        if kind == "not-checkable":
            if not isinstance(c.get("reason"), str) or not c.get("reason"):
                err(f"{cp}.reason", "required for not-checkable: why feather cannot check it")
            claim.reason = str(c.get("reason", ""))
            if "paper" in c:
                claim.paper = c["paper"] if isinstance(c["paper"], (int, float)) else None
        elif kind == "ordering":
            checks = c.get("checks")
            if not isinstance(checks, list) or not checks or not all(
                    isinstance(x, str) for x in checks):
                err(f"{cp}.checks", "required for ordering: a list of comparisons `A OP B`")
                checks = []
            for j, chk in enumerate(checks):
                m = re.match(r"^(.*?)\s*(<=|>=|<|>)\s*(.*)$", chk)
                if not m or "<" in m.group(3) or ">" in m.group(3):
                    err(f"{cp}.checks[{j}]", f"not one comparison `A OP B`: {chk!r}")
                    continue
                exprs += [(f"{cp}.checks[{j}]", m.group(1)), (f"{cp}.checks[{j}]", m.group(3))]
            claim.checks = list(checks)
        else:
            if not isinstance(c.get("value"), str) or not c.get("value"):
                err(f"{cp}.value", "required: an expression over run fields, e.g. "
                    "`a.throughput_tok_s / b.throughput_tok_s`")
            else:
                claim.value = c["value"]
                exprs.append((f"{cp}.value", c["value"]))
            p = c.get("paper")
            if not isinstance(p, (int, float)) or isinstance(p, bool) or not math.isfinite(p):
                err(f"{cp}.paper", "required: the paper's number")
            elif kind in ("ratio", "value") and p <= 0:
                err(f"{cp}.paper", "must be > 0 for a ratio or a value")
            else:
                claim.paper = float(p)
            if kind == "threshold":
                if c.get("op") not in OPS:
                    err(f"{cp}.op", f"must be one of {' '.join(OPS)}, got {c.get('op')!r}")
                claim.op = str(c.get("op", ""))
        used: list[str] = []
        for epath, e in exprs:
            try:
                names = _expr_names(e)
                _check_expr(e)
            except (SyntaxError, ValueError) as ex:
                err(epath, f"bad expression {e!r}: {ex}")
                continue
            for n in sorted(names):
                if n not in runs:
                    err(epath, f"unknown run {n!r}")
                elif n not in used:
                    used.append(n)
        claim.runs = used
        claims.append(claim)
    if problems:
        raise ClaimsError(problems)
    return ClaimsFile(fname, float(tol), runs, families, claims, list(optional_keys),
                      {k: dict(v) for k, v in scheds.items()}, default_sets)


# ---------------------------------------------------------------------------------------------
# Expressions: run.field, numbers, + - * /, abs/min/max, and a few functions over results.h5.

FUNCS = {"abs", "min", "max", "window_mean_batch", "window_max_batch", "bench"}


def _check_expr(expr: str) -> None:
    tree = ast.parse(expr, mode="eval")
    for n in ast.walk(tree):
        ok = isinstance(n, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult,
                            ast.Div, ast.USub, ast.UAdd, ast.Constant, ast.Name, ast.Attribute,
                            ast.Load, ast.Call))
        if not ok:
            raise ValueError(f"{type(n).__name__} is not allowed")
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id in FUNCS):
            raise ValueError("only abs, min, max, window_mean_batch, window_max_batch, bench "
                             "may be called")
        if isinstance(n, ast.Constant) and not isinstance(n.value, (int, float, str)):
            raise ValueError("constants must be numbers or strings")


class RunResult:
    """What an expression sees for one run: summary.json fields plus derived ones."""

    def __init__(self, name: str, directory: pathlib.Path | None, summary: dict[str, Any]):
        self.name, self.directory, self.summary = name, directory, summary

    def get(self, fieldname: str) -> float:
        s = self.summary
        if fieldname == "sched_share":
            return s["scheduler_cpu_s"] / s["duration_s"]
        if fieldname in s:
            v = s[fieldname]
            if v is None:
                raise ValueError(f"{self.name}.{fieldname} is null")
            return float(v)
        terms = s.get("step_time_s_by_term", {})
        if fieldname.startswith("term_") and fieldname[5:] in terms:
            return float(terms[fieldname[5:]])
        raise ValueError(f"run {self.name} has no field {fieldname!r}")


def _window(run: RunResult, t0: float, t1: float) -> Any:
    import h5py
    import numpy as np
    with h5py.File(run.directory / "results.h5") as f:
        start = f["steps/start_ns"][:] * 1e-9
        batch = f["steps/batch_size"][:].astype(float)
    sel = (start >= t0) & (start < t1)
    if not sel.any():
        raise ValueError(f"run {run.name} has no step in [{t0}, {t1}) s")
    return np.asarray(batch[sel])


def evaluate(expr: str, results: dict[str, RunResult]) -> float:
    tree = ast.parse(expr, mode="eval")

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if b == 0:
                raise ValueError(f"division by zero in {expr!r}")
            return a / b
        if isinstance(n, ast.Attribute):
            if not isinstance(n.value, ast.Name):
                raise ValueError("only RUN.FIELD")
            return results[n.value.id].get(n.attr)
        if isinstance(n, ast.Name):
            return results[n.id]
        if isinstance(n, ast.Call):
            fn = n.func.id
            args = [ev(a) for a in n.args]
            if fn == "abs":
                return abs(args[0])
            if fn == "min":
                return min(args)
            if fn == "max":
                return max(args)
            if fn == "window_mean_batch":
                return float(_window(args[0], args[1], args[2]).mean())
            if fn == "window_max_batch":
                return float(_window(args[0], args[1], args[2]).max())
            if fn == "bench":  # bench(RUN, "operations.insert.mean_ns")
                v: Any = args[0].summary
                for part in str(args[1]).split("."):
                    v = v[part]
                return float(v)
        raise ValueError(f"cannot evaluate {ast.dump(n)}")

    v = ev(tree)
    if isinstance(v, RunResult) or not isinstance(v, (int, float)):
        raise ValueError(f"{expr!r} is not a number")
    return float(v)


# ---------------------------------------------------------------------------------------------
# Verdicts.


def verdict(claim: Claim, value: float | None, check_results: list[bool] | None,
            tol: float) -> str:
    if claim.kind == "not-checkable":
        return "not checkable"
    if claim.kind == "ordering":
        assert check_results is not None
        held = sum(check_results)
        if held == len(check_results):
            return "agree"
        return "partly" if 2 * held >= len(check_results) else "disagree"
    assert value is not None and claim.paper is not None
    if claim.kind == "threshold":
        return "agree" if OPS[claim.op](value, claim.paper) else "disagree"
    r = value / claim.paper
    if 1 - tol <= r <= 1 + tol:
        return "agree"
    if claim.kind == "value":
        return "partly" if 1 - 2 * tol <= r <= 1 + 2 * tol else "disagree"
    if claim.paper != 1 and (value - 1) * (claim.paper - 1) > 0:
        return "partly"
    return "disagree"


def fmt_num(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.01:
        return f"{v:.3g}"
    return f"{v:.2e}"


def paper_cell(c: Claim) -> str:
    if c.paper_text:
        return c.paper_text
    if c.paper is None:
        return "-"
    if c.kind == "threshold":
        return f"{c.op} {fmt_num(c.paper)}"
    if c.kind == "ratio":
        return f"{fmt_num(c.paper)}x"
    return fmt_num(c.paper)


# ---------------------------------------------------------------------------------------------
# Running.


def command_of(r: RunSpec, binary: str = "feather") -> str:
    if r.kind == "bench":
        return " ".join([binary, "bench", r.bench, "--json", *r.args])
    parts = [binary, "run", r.scenario]
    for k, v in r.sets.items():
        val = json.dumps(v) if not isinstance(v, str) else v
        parts.append(f"--set {k}={val}")
    return " ".join(parts)


def probe_optional(binary: pathlib.Path, repo: pathlib.Path, cf: ClaimsFile,
                   tmp: pathlib.Path) -> dict[str, bool]:
    """Which optional keys this binary accepts (a 1-request run with the key set)."""
    supported = {}
    for key in cf.optional_keys:
        values = [r.sets[key] for r in cf.runs.values() if r.kind == "run" and key in r.sets]
        if not values:
            continue
        out = tmp / f"probe-{_fmt_token(key)}"
        value = values[0] if isinstance(values[0], str) else json.dumps(values[0])  # as execute
        p = subprocess.run([str(binary), "run", "scenarios/default.yaml", "--out", str(out),
                            "--set", "workload.requests=1", "--set", f"{key}={value}",
                            "--set", "scheduler_time=zero"],
                           cwd=repo, capture_output=True, text=True)
        supported[key] = p.returncode == 0
        shutil.rmtree(out, ignore_errors=True)
    return supported


def execute(r: RunSpec, binary: pathlib.Path, repo: pathlib.Path, cache: pathlib.Path,
            dropped: set[str]) -> tuple[str, RunResult | None, str, float]:
    """Runs one spec (or reuses its cached output); returns (name, result, error, wall s)."""
    d = cache / r.run_id(dropped)
    done = d / "done.json"
    if done.is_file():
        meta = json.loads(done.read_text())
        summary = json.loads((d / meta["file"]).read_text())
        return r.name, RunResult(r.name, d / "run", summary), "", 0.0
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    t0 = time.monotonic()
    if r.kind == "bench":
        cmd = [str(binary), "bench", r.bench, "--json", *r.args]
        p = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        if p.returncode != 0:
            return r.name, None, f"exit {p.returncode}: {p.stderr.strip()[-300:]}", 0.0
        (d / "bench.json").write_text(p.stdout)
        fname = "bench.json"
    else:
        cmd = [str(binary), "run", r.scenario, "--out", str(d / "run")]
        for k, v in r.sets.items():
            if k in dropped:
                continue
            cmd += ["--set", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
        p = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
        if p.returncode != 0 or not (d / "run" / "summary.json").is_file():
            return r.name, None, f"exit {p.returncode}: {p.stderr.strip()[-300:]}", 0.0
        fname = "run/summary.json"
    wall = time.monotonic() - t0
    done.write_text(json.dumps({"file": fname, "key": r.key(dropped), "wall_s": wall}))
    summary = json.loads((d / fname).read_text())
    return r.name, RunResult(r.name, d / "run", summary), "", wall


# ---------------------------------------------------------------------------------------------
# Output.

COLUMNS = ["id", "section", "group", "tex_line", "claim", "setting", "command", "paper",
           "feather", "verdict", "note"]


@dataclass
class Row:
    claim: Claim
    feather: str
    verdict: str
    setting: str
    command: str
    error: str = ""


def setting_of(c: Claim, cf: ClaimsFile) -> str:
    """`run: command` per run of the claim, less the `defaults.set` keys it keeps unchanged."""
    parts = []
    for n in c.runs:
        r = cf.runs[n]
        own = RunSpec(r.name, r.kind, r.scenario,
                      {k: v for k, v in r.sets.items()
                       if not (k in cf.defaults and cf.defaults[k] == v)}, r.bench, r.args)
        parts.append(f"{n}: {command_of(own)}")
    return "; ".join(parts)


def defaults_line(cf: ClaimsFile) -> str:
    if not cf.defaults:
        return ""
    sets = " ".join(f"--set {k}={v}" for k, v in cf.defaults.items())
    return f"Every `feather run` below also has `{sets}` unless it sets the key itself.\n\n"


def render_table_md(rows: list[Row], cf: ClaimsFile) -> str:
    out = io.StringIO()
    out.write(defaults_line(cf))
    out.write("| id | section | claim (paper .tex line) | setting: run name and command | paper "
              "| feather | verdict | note |\n")
    out.write("| --- | --- | --- | --- | ---: | --- | --- | --- |\n")
    for r in rows:
        c = r.claim
        cells = [c.id, f"{c.section} ({c.group})", f"{c.quote} (l. {c.tex_line})",
                 r.setting or c.reason, paper_cell(c), r.feather or "-", r.verdict,
                 "; ".join(x for x in (c.note, r.error) if x)]
        out.write("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |\n")
    return out.getvalue()


def render_table_csv(rows: list[Row], cf: ClaimsFile) -> str:
    """Every column in full: the setting as given, and the complete commands (defaults included)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        c = r.claim
        w.writerow([c.id, c.section, c.group, c.tex_line, c.quote, r.setting or c.reason,
                    r.command, paper_cell(c), r.feather, r.verdict,
                    "; ".join(x for x in (c.note, r.error) if x)])
    return buf.getvalue()


def counts(rows: list[Row]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for g in GROUPS + ("all",):
        sel = [r for r in rows if g == "all" or r.claim.group == g]
        d = {v: sum(1 for r in sel if r.verdict == v)
             for v in ("agree", "partly", "disagree", "not run", "not checkable")}
        d["checked"] = d["agree"] + d["partly"] + d["disagree"]
        out[g] = d
    return out


def render_summary_md(rows: list[Row]) -> str:
    cs = counts(rows)
    lines = [f"| group | checked | agree | partly | disagree | agree % | not run | not checkable |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for g, d in cs.items():
        pct = f"{100 * d['agree'] / d['checked']:.0f} %" if d["checked"] else "-"
        lines.append(f"| {g} | {d['checked']} | {d['agree']} | {d['partly']} | {d['disagree']} | "
                     f"{pct} | {d['not run']} | {d['not checkable']} |")
    return "\n".join(lines) + "\n"


def render_moved(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The claims whose verdict changed since the previous output (the run this one replaced)."""
    lines = [f"# Claims that moved since the previous run", "",
             f"Previous: git {old.get('git_rev', '?')}, binary {old.get('binary_sha256_12', '?')}; "
             f"this run: git {new['git_rev']}, binary {new['binary_sha256_12']}.", ""]
    moved = [(cid, old["verdicts"].get(cid, "(new claim)"), v)
             for cid, v in new["verdicts"].items() if old["verdicts"].get(cid) != v]
    gone = [cid for cid in old["verdicts"] if cid not in new["verdicts"]]
    if not moved and not gone:
        return "\n".join(lines + ["No verdict changed.", ""])
    lines += ["| claim | before | after | feather before | feather after |",
              "| --- | --- | --- | --- | --- |"]
    for cid, before, after in moved:
        fb = old.get("feather", {}).get(cid, "").replace("|", "\\|")
        fa = new["feather"].get(cid, "").replace("|", "\\|")
        lines.append(f"| {cid} | {before} | {after} | {fb} | {fa} |")
    for cid in gone:
        lines.append(f"| {cid} | {old['verdicts'][cid]} | (claim removed) | | |")
    return "\n".join(lines) + "\n"


def draw_figures(cf: ClaimsFile, results: dict[str, RunResult], figdir: pathlib.Path) -> list[str]:
    """One PNG per family with a `figure`: feather's metric against the family's x axis, one line
    per value of its other axes, the paper's stated points (if any) as black stars."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    drawn = []
    for fam in cf.families.values():
        if not fam.figure:
            continue
        fig_spec = fam.figure
        x, y = fig_spec["x"], fig_spec["y"]
        ys = y if isinstance(y, list) else [y]
        others = [a for a in fam.axes if a != x]
        figure, axs = plt.subplots(1, len(ys), figsize=(max(6.0, 4.2 * len(ys)), 3.4),
                                   squeeze=False)
        for ax, metric in zip(axs[0], ys):
            lines: dict[tuple, list[tuple[Any, float]]] = {}
            for combo, name in fam.points:
                if name not in results:
                    continue
                key = tuple(combo[a] for a in others)
                try:
                    val = results[name].get(metric)
                except ValueError:
                    continue
                lines.setdefault(key, []).append((combo[x], val))
            numeric = all(isinstance(v, (int, float)) for pts in lines.values() for v, _ in pts)
            for key, pts in lines.items():
                label = ", ".join(str(k) if a == SCHEDULER_KEY else f"{a}={k}"
                                  for a, k in zip(others, key)) or "feather"
                if numeric:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
                else:
                    ax.plot([str(p[0]) for p in pts], [p[1] for p in pts], marker="o",
                            label=label)
            # The paper's stated values on this figure's first panel (the figure's `paper` list).
            marks = fig_spec.get("paper", []) if metric == ys[0] else []
            for px, py, lab in marks:
                ax.plot([px], [py], marker="*", markersize=12, color="k", linestyle="none")
                ax.annotate(f"paper: {lab}", (px, py), fontsize=7)
            if fig_spec.get("log_x") and numeric:
                ax.set_xscale("log")
            ax.set_xlabel(fig_spec.get("x_label", x))
            ax.set_ylabel(metric)
            ax.grid(alpha=0.3)
            if len(lines) > 1:
                ax.legend(fontsize=7)
        figure.suptitle(fig_spec.get("title", fam.name) + " (feather, model engine)", fontsize=9)
        figure.tight_layout()
        path = figdir / f"{fam.name}.png"
        # Matplotlib stamps no date into PNGs with this metadata, so reruns compare byte-wise.
        figure.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(figure)
        drawn.append(path.name)
    return drawn


def build_rows(cf: ClaimsFile, results: dict[str, RunResult], errors: dict[str, str],
               dropped: set[str] | frozenset[str] = frozenset()) -> list[Row]:
    """One row per claim: feather's value and the verdict (a claim whose runs failed: not run).
    A claim any of whose runs lost a key this binary does not know says so in its error/note."""
    rows: list[Row] = []
    for c in cf.claims:
        lost = sorted({f"{k}={v}" for n in c.runs for k, v in cf.runs[n].sets.items()
                       if k in dropped})
        flag = f"ran without {', '.join(lost)} (this binary does not know the key)" if lost else ""
        setting = setting_of(c, cf) if c.kind != "not-checkable" else ""
        command = " ; ".join(command_of(cf.runs[n]) for n in c.runs)
        if c.kind == "not-checkable":
            rows.append(Row(c, "", "not checkable", c.reason, ""))
            continue
        missing = [n for n in c.runs if n not in results]
        if missing:
            rows.append(Row(c, "", "not run", setting, command,
                            error="; ".join(f"{n}: {errors.get(n, '?')}" for n in missing)))
            continue
        try:
            if c.kind == "ordering":
                held = []
                shown = []
                for chk in c.checks:
                    m = re.match(r"^(.*?)\s*(<=|>=|<|>)\s*(.*)$", chk)
                    a, b = evaluate(m.group(1), results), evaluate(m.group(3), results)
                    ok = OPS[m.group(2)](a, b)
                    held.append(ok)
                    shown.append(f"{fmt_num(a)} {m.group(2)} {fmt_num(b)} "
                                 f"{'yes' if ok else 'NO'}")
                v = verdict(c, None, held, cf.tolerance)
                feather = f"{sum(held)}/{len(held)} hold: " + "; ".join(shown)
            else:
                val = evaluate(c.value, results)
                v = verdict(c, val, None, cf.tolerance)
                feather = fmt_num(val) + ("x" if c.kind == "ratio" else "")
            rows.append(Row(c, feather, v, setting, command, error=flag))
        except (ValueError, KeyError, OSError) as e:
            rows.append(Row(c, "", "not run", setting, command, error=str(e)))
    return rows


def git_rev(repo: pathlib.Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo,
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--claims", default="scripts/paper_claims.yaml")
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--out", default="results/paper-claims")
    ap.add_argument("--cache", default="out/paper-claims",
                    help="where runs are kept (reused by a rerun with the same binary)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="claim ids (prefix match)")
    ap.add_argument("--check", action="store_true", help="validate the claims file; run nothing")
    ap.add_argument("--feather-stop", default=None, metavar="STOP",
                    help="run Feather as the binary ships it: the feather* aliases that name the "
                         "bandit get this stop policy (e.g. converge, the default) and the "
                         "binary's default CHT working set; needs its own --out")
    args = ap.parse_args(argv)
    repo = pathlib.Path(__file__).resolve().parents[1]
    os.chdir(repo)
    t_start = time.monotonic()
    claims_path = pathlib.Path(args.claims)
    try:
        text = claims_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"paper-claims: {claims_path}: cannot read: {e}", file=sys.stderr)
        return 2
    try:
        cf = parse_claims(text, str(claims_path), repo, feather_stop=args.feather_stop)
    except ClaimsError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        return 2
    if args.feather_stop is not None and not args.check and \
            pathlib.Path(args.out) == pathlib.Path("results/paper-claims"):
        print("paper-claims: --feather-stop runs another Feather than the paper's; give it its own "
              "--out DIR (results/paper-claims holds the check as the paper ran Feather)",
              file=sys.stderr)
        return 2
    if args.only:
        if not args.check and pathlib.Path(args.out) == pathlib.Path("results/paper-claims"):
            print("paper-claims: --only writes a partial table; give it its own --out DIR "
                  "(results/paper-claims holds the full check)", file=sys.stderr)
            return 2
        cf.claims = [c for c in cf.claims if any(c.id.startswith(o) for o in args.only)]
    if args.check:
        print(f"{claims_path}: {len(cf.claims)} claims, {len(cf.runs)} runs: ok")
        return 0
    out = pathlib.Path(args.out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and
                                               not (out / MARKER).is_file())):
        print(f"paper-claims: {out} exists and was not written by this script (no {MARKER}); "
              "refusing to overwrite it", file=sys.stderr)
        return 2
    binary = pathlib.Path(args.build) / "feather"
    if not os.access(binary, os.X_OK):
        print(f"paper-claims: {binary} not found (build it, or pass --build DIR)", file=sys.stderr)
        return 2

    binary_sha = hashlib.sha256(binary.read_bytes()).hexdigest()[:12]
    cache = pathlib.Path(args.cache) / binary_sha
    cache.mkdir(parents=True, exist_ok=True)
    supported = probe_optional(binary, repo, cf, cache)
    dropped = {k for k, ok in supported.items() if not ok}
    needed = sorted({n for c in cf.claims for n in c.runs} |
                    {n for f in cf.families.values() if f.figure for _, n in f.points})
    # Dedupe identical specs (different names, same run).
    by_id: dict[str, list[str]] = {}
    for n in needed:
        by_id.setdefault(cf.runs[n].run_id(dropped), []).append(n)
    results: dict[str, RunResult] = {}
    errors: dict[str, str] = {}
    walls: dict[str, float] = {}
    print(f"paper-claims: {len(cf.claims)} claims, {len(by_id)} distinct runs "
          f"({len(needed)} named), --jobs {args.jobs}, binary {binary} ({binary_sha})"
          + (f"; not supported by this binary, dropped: {', '.join(sorted(dropped))}"
             if dropped else ""), file=sys.stderr)
    # Slowest-looking first (runs with more requests and SGLang selectors) keeps both workers busy.
    order = sorted(by_id.values(), key=lambda ns: -_cost_guess(cf.runs[ns[0]]))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(execute, cf.runs[ns[0]], binary, repo, cache, dropped): ns
                for ns in order}
        for i, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            ns = futs[fut]
            _, res, err, wall = fut.result()
            for n in ns:
                if res is not None:
                    results[n] = RunResult(n, res.directory, res.summary)
                else:
                    errors[n] = err
                walls[n] = wall
            print(f"  [{i}/{len(by_id)}] {ns[0]} {'ok' if res else 'FAILED: ' + err} "
                  f"{wall:.1f} s", file=sys.stderr)

    rows = build_rows(cf, results, errors, dropped)

    # Write into a temporary sibling, then swap it in.
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "figures").mkdir(parents=True)
    (tmp / MARKER).write_text("written by scripts/paper_claims.py; safe to replace\n")
    (tmp / "table.md").write_text(render_table_md(rows, cf))
    (tmp / "table.csv").write_text(render_table_csv(rows, cf))
    (tmp / "summary.md").write_text(render_summary_md(rows))
    summary = {"counts": counts(rows), "tolerance": cf.tolerance,
               "verdicts": {r.claim.id: r.verdict for r in rows},
               "feather": {r.claim.id: r.feather for r in rows},
               "binary_sha256_12": binary_sha, "git_rev": git_rev(repo)}
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    previous = out / "summary.json"
    if previous.is_file():
        try:
            (tmp / "moved.md").write_text(render_moved(json.loads(previous.read_text()), summary))
        except (ValueError, KeyError):
            pass
    drawn = draw_figures(cf, results, tmp / "figures")
    wall_total = time.monotonic() - t_start
    run_log = {n: {"command": command_of(cf.runs[n]), "wall_s": round(walls.get(n, 0.0), 2),
                   "error": errors.get(n, "")} for n in needed}
    prov = {"binary": str(binary), "binary_sha256_12": binary_sha,
            "feather_version": subprocess.run([str(binary), "version"], capture_output=True,
                                              text=True).stdout.strip(),
            "git_rev": git_rev(repo), "host": platform.node(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "claims_file": str(claims_path), "jobs": args.jobs,
            "feather_stop": args.feather_stop,
            "distinct_runs": len(by_id),
            "runs_executed_now": sum(1 for ns in by_id.values() if walls.get(ns[0], 0.0) > 0),
            "wall_s": round(wall_total, 1), "optional_keys_supported": supported,
            "figures": drawn, "runs": run_log}
    (tmp / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    if out.exists():
        keep = [p for p in ("README.md",) if (out / p).is_file()]
        for p in keep:
            shutil.copy2(out / p, tmp / p)
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out)
    print(render_summary_md(rows), end="")
    print(f"paper-claims: wrote {out} in {wall_total:.0f} s", file=sys.stderr)
    return 0


def _cost_guess(r: RunSpec) -> float:
    if r.kind == "bench":
        return 1
    n = float(r.sets.get("workload.requests", 3000))
    sel = str(r.sets.get("scheduler.selector", ""))
    slow = sel in ("lpm", "dfs-weight", "block-table")
    # A radix selector under an RL stop policy ranks the queue every round of many small batches.
    return n * (20 if slow else 1) * (20 if slow and r.sets.get("scheduler.stop") != "always" else 1)


if __name__ == "__main__":
    sys.exit(main())
