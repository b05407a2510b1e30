#!/usr/bin/env python3
"""plot_sweep.py: the figures of a `feather sweep` output folder (run by `feather plot DIR`).

Usage: plot_sweep.py [--out FIGDIR] DIR [DIR ...]
       plot_sweep.py --trace-stats STATS.json [--out FIGDIR]   (`feather trace-stats --json`)

Reads DIR/table.csv and DIR/sweep.json (its `plot` hints: x, kind, title, x_label, log_x, lines,
metrics) and writes, as PNG and SVG, into FIGDIR (default DIR/figures):
  <name>.png/.svg              kind lines (numeric x) or bars (categorical x): throughput, average
                               batch size and TBT (or plot.metrics) against the swept variable,
                               one line (or bar colour) per scheduler / remaining swept values
  <name>-timeseries.png/.svg   kind timeseries: throughput, batch size and step time over simulated
                               time, one line per point, from each point's results.h5 (needs h5py)
and DIR/index.md: the figures, the main table columns and the sweep's provenance.

Needs matplotlib (Debian: python3-matplotlib; python3-h5py for time series). Output is
deterministic for the same table (no dates in SVG/PNG metadata, fixed SVG ids).
"""
import csv
import json
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover - environment check
    sys.stderr.write(
        "feather plot: matplotlib is missing for %s\n"
        "  on Debian/Ubuntu: apt-get install python3-matplotlib python3-h5py\n"
        "  (or point FEATHER_PYTHON / --python at a Python 3 that has it)\n" % sys.executable)
    sys.exit(3)

matplotlib.rcParams.update({
    "svg.hashsalt": "feather",      # stable ids in SVG output
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 110,
})

SCHEDULER_KEYS = ("scheduler.selector", "scheduler.stop", "scheduler.reward_time")
PRETTY = {
    "fcfs+always": "FCFS (vLLM)",
    "lpm+always": "LPM (SGLang)",
    "dfs-weight+always": "DFS-weight (SGLang)",
    "block-table+always": "block table",
    "oracle+always": "Oracle",
    "fcfs+dynamic-batching": "Dynamic Batching",
    "cht+always": "CHT, no RL",
    "cht+heuristic": "Feather heuristic",
    "cht+bandit": "Feather bandit",
    "cht+bandit+decode-only": "Feather bandit (decode-only reward)",
    "cht+qlearning": "Feather Q-learning",
    "lpm+bandit": "radix (LPM) + bandit",
    "dfs-weight+bandit": "radix (DFS-weight) + bandit",
}
METRIC_LABELS = {
    "throughput_tok_s": "throughput (tok/s)",
    "mean_batch_size": "average batch size",
    "mean_tbt_ms": "mean TBT (ms)",
    "p99_tbt_ms": "p99 TBT (ms)",
    "mean_ttft_ms": "mean TTFT (ms)",
    "scheduler_cpu_s": "scheduler CPU time (s)",
    "cascade_step_fraction": "steps with cascade attention",
    "engine_busy_s": "engine busy (s)",
    "duration_s": "simulated duration (s)",
}
DEFAULT_METRICS = ["throughput_tok_s", "mean_batch_size", "mean_tbt_ms"]
SAVE_KW = {"png": {"metadata": {"Software": None}}, "svg": {"metadata": {"Date": None}}}


def number(text):
    try:
        v = float(text)
        return v if math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


def save(fig, folder, stem):
    paths = []
    for ext in ("png", "svg"):
        path = os.path.join(folder, "%s.%s" % (stem, ext))
        fig.savefig(path, bbox_inches="tight", **SAVE_KW[ext])
        paths.append(path)
    plt.close(fig)
    return paths


def read_sweep(folder):
    with open(os.path.join(folder, "table.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    meta = {}
    path = os.path.join(folder, "sweep.json")
    if os.path.exists(path):
        with open(path) as f:
            meta = json.load(f)
    return rows, meta


def line_label(row, keys):
    """The legend label of a row: its scheduler (pretty) and the other non-x swept values."""
    parts = []
    if any(k in SCHEDULER_KEYS for k in keys):
        parts.append(PRETTY.get(row.get("scheduler", ""), row.get("scheduler", "")))
    for k in keys:
        if k in SCHEDULER_KEYS:
            continue
        short = k.rsplit(".", 1)[-1]
        parts.append("%s=%s" % (short, row.get(k, "")))
    return ", ".join(p for p in parts if p) or "all"


def choose_x(meta, swept):
    plot = meta.get("plot", {})
    if plot.get("x"):
        return plot["x"]
    for k in swept:
        if k not in SCHEDULER_KEYS:
            return k
    return "scheduler"


def summary_plot(rows, meta, folder, out_dir):
    plot = meta.get("plot", {})
    swept = meta.get("swept_keys", [])
    name = meta.get("name", os.path.basename(os.path.abspath(folder)))
    x = choose_x(meta, swept)
    line_keys = [k for k in swept if k != x]
    if plot.get("lines"):
        line_keys = [k.strip() for k in plot["lines"].split(",")]
    if x == "scheduler":
        line_keys = [k for k in line_keys if k not in SCHEDULER_KEYS]
    metrics = plot.get("metrics") or DEFAULT_METRICS
    xs = [r.get(x, "") for r in rows]
    numeric = all(number(v) is not None for v in xs) and plot.get("kind") != "bars"
    title = plot.get("title", name)
    x_label = plot.get("x_label", x)

    groups = {}
    for r in rows:
        groups.setdefault(line_label(r, line_keys) if line_keys else "all", []).append(r)

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    axes = axes[0]
    if numeric:
        for label, members in groups.items():
            members = sorted(members, key=lambda r: number(r[x]))
            px = [number(r[x]) for r in members]
            for ax, m in zip(axes, metrics):
                ax.plot(px, [number(r.get(m)) for r in members], marker="o", markersize=3,
                        label=label)
        for ax, m in zip(axes, metrics):
            ax.set_xlabel(x_label)
            ax.set_ylabel(METRIC_LABELS.get(m, m))
            if plot.get("log_x"):
                ax.set_xscale("log")
    else:
        categories = []
        for v in xs:
            if v not in categories:
                categories.append(v)
        if x == "scheduler":
            labels = [PRETTY.get(c, c) for c in categories]
        else:
            labels = categories
        width = 0.8 / max(1, len(groups))
        for gi, (label, members) in enumerate(groups.items()):
            by_cat = {r[x]: r for r in members}
            for ax, m in zip(axes, metrics):
                heights = [number(by_cat[c].get(m)) if c in by_cat else None for c in categories]
                pos = [i + (gi - (len(groups) - 1) / 2) * width for i in range(len(categories))]
                ax.bar(pos, [h if h is not None else 0 for h in heights], width=width,
                       label=label if len(groups) > 1 else None)
        for ax, m in zip(axes, metrics):
            ax.set_xticks(range(len(categories)))
            ax.set_xticklabels(labels, rotation=30, ha="right")
            ax.set_xlabel(x_label if x != "scheduler" else "")
            ax.set_ylabel(METRIC_LABELS.get(m, m))
    for ax, m in zip(axes, metrics):
        ax.set_title(METRIC_LABELS.get(m, m))
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)),
                   bbox_to_anchor=(0.5, -0.02 - 0.05 * math.ceil(len(labels) / 4)), frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    return save(fig, out_dir, name), x, metrics


def timeseries_plot(rows, meta, folder, out_dir):
    try:
        import h5py
        import numpy as np
    except ImportError:
        sys.stderr.write("feather plot: time series need h5py and numpy "
                         "(apt-get install python3-h5py); skipped\n")
        return []
    name = meta.get("name", os.path.basename(os.path.abspath(folder)))
    swept = meta.get("swept_keys", [])
    plot = meta.get("plot", {})
    fig, axes = plt.subplots(1, 3, figsize=(12.6, 3.4), squeeze=False)
    axes = axes[0]
    for r in rows:
        path = os.path.join(folder, "points", r["point"], "results.h5")
        if not os.path.exists(path):
            sys.stderr.write("feather plot: %s missing; its series skipped\n" % path)
            continue
        with h5py.File(path, "r") as f:
            start = f["steps/start_ns"][()] * 1e-9
            step = f["steps/step_ns"][()] * 1e-9
            batch = f["steps/batch_size"][()].astype(float)
            decode = f["steps/decode_tokens"][()].astype(float)
        if len(start) == 0:
            continue
        end = float(start[-1] + step[-1])
        width = max(end / 60.0, 1e-3)  # about 60 windows
        edges = np.arange(0.0, end + width, width)
        idx = np.clip(np.digitize(start, edges) - 1, 0, len(edges) - 2)
        tokens = np.bincount(idx, weights=decode, minlength=len(edges) - 1)
        steps_n = np.bincount(idx, minlength=len(edges) - 1)
        batch_sum = np.bincount(idx, weights=batch, minlength=len(edges) - 1)
        step_sum = np.bincount(idx, weights=step, minlength=len(edges) - 1)
        mid = (edges[:-1] + edges[1:]) / 2
        ok = steps_n > 0
        label = line_label(r, swept)
        axes[0].plot(mid, tokens / width, label=label, linewidth=1)
        axes[1].plot(mid[ok], batch_sum[ok] / steps_n[ok], label=label, linewidth=1)
        axes[2].plot(mid[ok], 1e3 * step_sum[ok] / steps_n[ok], label=label, linewidth=1)
    for ax, t in zip(axes, ("decode throughput (tok/s)", "average batch size",
                            "mean step time ≈ TBT (ms)")):
        ax.set_title(t)
        ax.set_xlabel("simulated time (s)")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)),
                   bbox_to_anchor=(0.5, -0.02 - 0.05 * math.ceil(len(labels) / 4)), frameon=False)
    fig.suptitle(plot.get("title", name) + " over time")
    fig.tight_layout()
    return save(fig, out_dir, name + "-timeseries")


def fmt(v):
    n = number(v)
    if n is None:
        return v or "-"
    if abs(n) >= 100 or n == int(n):
        return "{:,.0f}".format(n)
    return "{:.2f}".format(n)


def write_index(rows, meta, folder, out_dir, figures, x, metrics):
    name = meta.get("name", os.path.basename(os.path.abspath(folder)))
    plot = meta.get("plot", {})
    prov = meta.get("provenance", {})
    rel = os.path.relpath(out_dir, folder)
    lines = ["# %s" % plot.get("title", name), ""]
    lines.append("Sweep `%s` (base `%s`), %d points. Regenerate: `%s`, then `feather plot %s`." %
                 (meta.get("sweep_file", "?"), meta.get("base", "?"), len(rows),
                  prov.get("command", "feather sweep ..."), folder))
    if meta.get("set"):
        lines.append("Fixed overrides: " + ", ".join("`%s`" % s for s in meta["set"]) + ".")
    lines.append("")
    for path in figures:
        if path.endswith(".png"):
            stem = os.path.basename(path)
            lines.append("![%s](%s/%s)" % (stem, rel, stem))
            lines.append("")
    swept = meta.get("swept_keys", [])
    cols = ["scheduler"] + [k for k in swept if k not in SCHEDULER_KEYS]
    shown = ["throughput_tok_s", "mean_batch_size", "mean_tbt_ms", "p99_tbt_ms", "mean_ttft_ms",
             "scheduler_cpu_s", "cascade_step_fraction", "preemptions"]
    for m in metrics:
        if m not in shown:
            shown.append(m)
    head = cols + shown
    lines.append("| " + " | ".join(head) + " |")
    lines.append("| " + " | ".join("---" if c in cols else "---:" for c in head) + " |")
    for r in rows:
        cells = [PRETTY.get(r.get("scheduler", ""), r.get("scheduler", ""))]
        cells += [r.get(k, "") for k in cols[1:]]
        cells += [fmt(r.get(m, "")) for m in shown]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    profiles = sorted({r.get("profile", "") for r in rows})
    models = sorted({r.get("model", "") for r in rows})
    lines.append("Provenance: profile %s, model %s; feather %s (git %s, %s, %s) on %s (%s), %s." % (
        ", ".join(profiles), ", ".join(models), prov.get("feather_version", "?"),
        prov.get("git_rev", "?"), prov.get("build_type", "?"), prov.get("compiler", "?"),
        prov.get("hostname", "?"), prov.get("cpu_model", "?"), prov.get("date_utc", "?")))
    lines.append("Full table: `table.csv` / `table.h5`; points and their summary.json: `%s`." %
                 os.path.join(folder, "points"))
    lines.append("")
    with open(os.path.join(folder, "index.md"), "w") as f:
        f.write("\n".join(lines))


def trace_stats_plot(path, out_dir):
    """Figures of `feather trace-stats --json` output: rate over time, length percentiles, and
    the depth of prefix sharing."""
    with open(path) as f:
        s = json.load(f)
    stem = os.path.basename(path)
    for suffix in (".json", ".stats"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    fig, axes = plt.subplots(1, 3, figsize=(12.6, 3.4), squeeze=False)
    axes = axes[0]
    rate = s["rate_over_time"]
    bin_s = rate["bin_s"]
    counts = rate["requests_per_bin"]
    axes[0].bar([i * bin_s / 60 for i in range(len(counts))], [c / bin_s for c in counts],
                width=bin_s / 60 * 0.9, align="edge")
    axes[0].set_xlabel("time (min)")
    axes[0].set_title("arrival rate (req/s, %g s bins)" % bin_s)
    names = ["min", "p50", "p90", "p99", "max"]
    for key, label in (("input_tokens", "input"), ("output_tokens", "output")):
        axes[1].plot(names, [s[key][n] for n in names], marker="o", label=label)
    axes[1].set_yscale("log")
    axes[1].set_title("length percentiles (tokens)")
    axes[1].legend(frameon=False)
    sharing = s["sharing"]
    hist = sharing["reused_leading_blocks_histogram"]
    axes[2].bar([h["blocks"] for h in hist], [h["requests"] for h in hist])
    axes[2].set_xlabel("leading %d-token blocks seen before" % s["block_tokens"])
    axes[2].set_title("depth of prefix reuse (requests)")
    axes[2].tick_params(axis="x", rotation=30)
    fig.suptitle("%s: %d requests over %.0f min; %.1f%% of blocks seen before" % (
        stem, s["requests"], s["duration_s"] / 60, 100 * sharing["shared_block_fraction"]))
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    return save(fig, out_dir, stem)


def main(argv):
    out = None
    dirs = []
    trace_stats = []
    i = 0
    while i < len(argv):
        if argv[i] == "--out":
            out = argv[i + 1]
            i += 2
            continue
        if argv[i] == "--trace-stats":
            trace_stats.append(argv[i + 1])
            i += 2
            continue
        dirs.append(argv[i])
        i += 1
    for path in trace_stats:
        figures = trace_stats_plot(path, out or os.path.dirname(path) or ".")
        print("wrote %s" % ", ".join(figures))
    if trace_stats and not dirs:
        return 0
    if not dirs:
        sys.stderr.write(__doc__)
        return 2
    for folder in dirs:
        rows, meta = read_sweep(folder)
        if not rows:
            sys.stderr.write("feather plot: %s/table.csv has no rows\n" % folder)
            return 1
        out_dir = out or os.path.join(folder, "figures")
        os.makedirs(out_dir, exist_ok=True)
        figures, x, metrics = summary_plot(rows, meta, folder, out_dir)
        if meta.get("plot", {}).get("kind") == "timeseries":
            figures += timeseries_plot(rows, meta, folder, out_dir)
        write_index(rows, meta, folder, out_dir, figures, x, metrics)
        print("wrote %s and %s" % (", ".join(figures), os.path.join(folder, "index.md")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
