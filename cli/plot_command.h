// plot_command.h: `feather plot DIR... [--out FIGDIR] [--python PY]`: draws a sweep's figures.
//
// The drawing is scripts/plot_sweep.py (matplotlib; Debian's python3-matplotlib, plus
// python3-h5py for time-series figures read from results.h5), so neither running nor testing the
// simulator needs Python. This driver finds the script and an interpreter and runs it:
//   script: $FEATHER_PLOT_SCRIPT, else scripts/plot_sweep.py in a folder above the executable
//           (build trees inside the source tree), else the source tree named by the build
//           folder's CMakeCache.txt (CMAKE_HOME_DIRECTORY), else <prefix>/share/feather/.
//   python: --python, else $FEATHER_PYTHON, else /usr/bin/python3 (Debian's, which has the
//           packages even where another python3 comes first on PATH), else python3 on PATH.
// The script writes, per sweep folder, FIGDIR (default DIR/figures) with one PNG and one SVG per
// figure and DIR/index.md; a missing matplotlib is reported by the script with the apt-get line
// to fix it (exit code 3).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace feather {

struct PlotCommandOptions {
  std::vector<std::string> dirs;  // sweep output folders (with table.csv and sweep.json)
  std::string out_dir;            // empty: DIR/figures (only with a single DIR)
  std::string python;             // empty: see above
};

// Returns the script's exit code; throws std::runtime_error when no script or interpreter is
// found, std::invalid_argument for bad options.
int PlotCommand(const PlotCommandOptions& options, std::ostream& out);

// The plotting script's path, or "" when none is found (see above).
[[nodiscard]] std::string FindPlotScript();

}  // namespace feather
