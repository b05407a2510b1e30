// sweep_command.h: the `feather sweep` driver.
//
//   feather sweep SWEEP.yaml [--jobs N] [--shard K/N] [--out DIR] [--list]
//     Validates every point of the sweep (cli/sweep_spec.h; a problem anywhere: exit 2, nothing
//     written), then runs this shard's points, each as a child `feather run BASE --set ...
//     --out DIR/points/<point>` (the same binary), at most N at a time (default: the CPUs this
//     process may use). A point whose DIR/points/<point>/summary.json exists for the same
//     scenario is skipped, so a rerun resumes; `feather run` installs a point's directory with a
//     rename, so an interrupted point leaves nothing half-written (stale temp directories of this
//     shard's points are removed on the next run). When every point of the sweep is finished,
//     writes DIR/table.csv and DIR/table.h5 (cli/sweep_table.h). DIR/sweep.json records the
//     points and the provenance (sweep file, build, command, host, date). Default DIR:
//     out/sweeps/<sweep name>. --shard K/N runs every N-th point starting with the K-th (for
//     Slurm job arrays and GNU parallel); --list prints the shard's points and runs nothing.
//   feather sweep --merge DIR [SHARD_DIR...]
//     Gathers the points of DIR/sweep.json from DIR/points and, for points missing there, from
//     each SHARD_DIR/points (copied into DIR/points), and writes DIR/table.csv and DIR/table.h5.
//
// Progress: a line on stderr rewritten in place when stderr is a terminal (done / running /
// failed / total, ETA), else one line per finished point. A point that fails (non-zero exit,
// crash) does not stop the others; its stderr is kept in DIR/logs/<point>.log, the command exits
// with 1 and writes no table. SIGINT/SIGTERM (cli/interrupt.h): forwarded once to the running
// points (which stop and leave no output), waited for, then exit 130/143 with the finished
// points intact. Children run in their own process group (a terminal's Ctrl-C reaches only the
// sweep) and receive SIGTERM if the sweep itself dies (PR_SET_PDEATHSIG).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace feather {

struct SweepCommandOptions {
  std::string sweep_file;
  std::string out_dir;                  // empty: out/sweeps/<sweep name>
  uint32_t jobs = 0;                    // 0: the usable CPUs
  std::string shard;                    // "K/N"; empty: all points
  bool list = false;                    // print the points and exit
  std::vector<std::string> merge_dirs;  // --merge DIR [SHARD_DIR...]
  std::vector<std::string> sets;        // --set key=value, applied to every point last
  std::vector<std::string> command;     // argv, for provenance
};

// Returns the exit code (0, 1 when points failed or are missing, 130/143 when interrupted).
// Throws InputError for a bad sweep file, std::invalid_argument for bad options.
int SweepCommand(const SweepCommandOptions& options, std::ostream& out);

}  // namespace feather
