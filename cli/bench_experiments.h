// bench_experiments.h: `feather bench experiments`, the paper's engine micro-experiments (DESIGN.md,
// "Experiments the tool must reproduce", Exp 1–6) on the real CPU engine.
//
//   feather bench experiments [--target cpu|cuda] [--quick] [--out DIR] [--model NAME|FILE]
//                             [--threads N]
//
// Each point is one decode step of a hand-built batch (block tables sharing physical prefix
// blocks as a paged KV cache with prefix caching would), executed by hw::CpuEngine with cascade
// attention on and off: the whole step (GEMMs included) and its attention part are timed
// (median of 7 repetitions, 3 with --quick, taken in interleaved passes over all points after a
// warm-up pass, cascade off and on side by side: hw/interleaved_passes.h says why). Scaled to this CPU (cpu-small: 8 KiB of KV per token;
// LLC 32 MiB): prefixes of 1–2K tokens instead of 10K, batches of ≤ 128 instead of 500–800.
//   exp1  two 2,048-token prefixes, 64 requests, fraction f on prefix A (1, 63/64, 3/4, 1/2)
//   exp2  64 requests × 2,048 tokens, the first f of every context shared (f = 0 … 1)
//   exp3  100 requests in N groups of 1,024-token prefixes (N = 1 … 100)
//   exp4  a binary radix tree of L levels over 2,048 tokens, 64 requests at its leaves
//   exp5  batch size 1 … 128, one group vs five (1,024-token prefixes)
//   exp6  8 groups × 32 requests × 1,024 tokens decoded as k batches of 256 / k
// Per point: step time and its spread over the repetitions ((max − min) / median), attention
// time, decode tok/s, KV bytes referenced and unique, achieved attention bandwidth (referenced
// bytes / attention time) and, where perf_event_open allows, LLC loads and misses per step. Writes DIR/experiments.h5 (one table per experiment, host and
// build recorded) and DIR/experiments.csv, and prints a summary.
#pragma once

#include <iosfwd>
#include <string>

namespace feather {

struct BenchExperimentsOptions {
  bool quick = false;  // fewer points and repetitions (under a minute)
  std::string out_dir = "out/experiments";
  std::string model = "cpu-small";
  int threads = 0;  // 0: every CPU this process may use
  // "cpu", or "cuda": the same points on CudaEngines plus CUPTI's dram_bytes_read and l2_hit_rate
  // per point (exits 2 with one line without a GPU; compiled, never run here).
  std::string target = "cpu";
};

int BenchExperimentsCommand(const BenchExperimentsOptions& options, std::ostream& out);

}  // namespace feather
