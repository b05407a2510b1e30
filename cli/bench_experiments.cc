// bench_experiments.cc: `feather bench experiments` (see bench_experiments.h).
#include "cli/bench_experiments.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/atomic_file.h"
#include "calib/bench_table.h"
#include "calib/harness.h"
#include "hw/cpu_engine.h"
#include "hw/host_info.h"
#include "hw/probes.h"
#include "hw/synthetic_batch.h"
#include "sim/engine/model_config.h"
#include "sim/io/model_config_yaml.h"
#include "sim/io/scenario.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kBlockTokens = 16;

// A decode batch assembled from shared segments (runs of whole blocks held by several requests)
// and private suffixes, with physical ids drawn from a shuffled pool, as a paged KV cache hands
// them out.
class BatchBuilder {
 public:
  explicit BatchBuilder(uint64_t seed) : rng_(seed) {}

  // A shared run of `tokens` (a multiple of the block size); returns its index.
  size_t AddSegment(uint32_t tokens) {
    segments_.push_back(Allocate(tokens / kBlockTokens));
    return segments_.size() - 1;
  }

  // A decode request reading `segments` in order, then `private_tokens` of its own.
  void AddRequest(const std::vector<size_t>& segments, uint32_t private_tokens) {
    std::vector<uint32_t> table;
    uint32_t context = 0;
    for (const size_t s : segments) {
      table.insert(table.end(), segments_[s].begin(), segments_[s].end());
      context += static_cast<uint32_t>(segments_[s].size()) * kBlockTokens;
    }
    context += private_tokens;
    const uint32_t blocks = (context + 1 + kBlockTokens - 1) / kBlockTokens;  // + the new token
    const std::vector<uint32_t> own = Allocate(blocks - static_cast<uint32_t>(table.size()));
    table.insert(table.end(), own.begin(), own.end());
    tables_.push_back(std::move(table));
    contexts_.push_back(context);
  }

  // The plan, with ids remapped through a seeded permutation of [0, pool_blocks).
  hw::SyntheticBatch Finish(uint64_t pool_blocks, bool shuffle_order) {
    std::vector<uint32_t> permutation(pool_blocks);
    std::iota(permutation.begin(), permutation.end(), 0u);
    std::shuffle(permutation.begin(), permutation.end(), rng_);
    std::vector<size_t> order(tables_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    if (shuffle_order) std::shuffle(order.begin(), order.end(), rng_);
    hw::SyntheticBatch batch;
    batch.tables.reserve(order.size());
    for (const size_t i : order) {
      std::vector<uint32_t> table = tables_[i];
      for (uint32_t& block : table) block = permutation[block];
      batch.tables.push_back(std::move(table));
    }
    batch.requests.resize(order.size());
    for (size_t k = 0; k < order.size(); ++k) {
      StepRequest& r = batch.requests[k];
      r.id = static_cast<RequestId>(order[k]);
      r.context_tokens = contexts_[order[k]];
      r.new_tokens = 1;
      r.is_prefill = false;
      r.block_table = batch.tables[k];
    }
    batch.plan.requests = batch.requests;
    batch.plan.block_tokens = kBlockTokens;
    hw::FillPlanFields(batch.plan);
    batch.blocks_used = next_block_;
    batch.pool_blocks = pool_blocks;
    return batch;
  }

  [[nodiscard]] uint64_t blocks() const { return next_block_; }

 private:
  std::vector<uint32_t> Allocate(uint32_t count) {
    std::vector<uint32_t> ids(count);
    std::iota(ids.begin(), ids.end(), next_block_);
    next_block_ += count;
    return ids;
  }

  std::mt19937_64 rng_;
  std::vector<std::vector<uint32_t>> segments_;
  std::vector<std::vector<uint32_t>> tables_;
  std::vector<uint32_t> contexts_;
  uint32_t next_block_ = 0;
};

struct Point {
  std::string experiment;
  std::string variant;  // what distinguishes the point within its experiment
  double x = 0;         // the swept variable
  hw::SyntheticBatch batch;
  double batches = 1;  // exp6: how many such batches the workload needs
};

// Requests in `groups` groups of `prefix` shared tokens plus `suffix` private ones each.
hw::SyntheticBatch GroupBatch(uint32_t requests, uint32_t groups, uint32_t prefix,
                              uint32_t suffix, uint64_t pool, uint64_t seed) {
  BatchBuilder builder(seed);
  std::vector<size_t> segments;
  for (uint32_t g = 0; g < groups; ++g) segments.push_back(builder.AddSegment(prefix));
  for (uint32_t r = 0; r < requests; ++r) {
    if (groups == 0) {
      builder.AddRequest({}, prefix + suffix);
    } else {
      builder.AddRequest({segments[r % groups]}, suffix);
    }
  }
  return builder.Finish(pool, true);
}

std::vector<Point> Experiments(bool quick, uint64_t pool) {
  std::vector<Point> points;
  uint64_t seed = 1;
  auto add = [&](std::string experiment, std::string variant, double x, hw::SyntheticBatch batch,
                 double batches = 1) {
    points.push_back({std::move(experiment), std::move(variant), x, std::move(batch), batches});
  };
  // Exp 1: two prefixes, fraction f of the 64 requests on prefix A.
  for (const uint32_t on_a : {64u, 63u, 48u, 32u}) {
    BatchBuilder b(seed++);
    const size_t a = b.AddSegment(2048);
    const size_t other = b.AddSegment(2048);
    for (uint32_t r = 0; r < 64; ++r) b.AddRequest({r < on_a ? a : other}, 20);
    add("exp1", "f=" + std::to_string(on_a) + "/64", on_a / 64.0, b.Finish(pool, true));
  }
  // Exp 2: fraction f of every 2,048-token context shared by all 64 requests.
  for (const uint32_t shared : {0u, 512u, 1024u, 1536u, 2048u}) {
    add("exp2", "shared=" + std::to_string(shared), shared / 2048.0,
        GroupBatch(64, shared > 0 ? 1 : 0, shared, 2048 - shared + (shared > 0 ? 0 : 0), pool,
                   seed++));
  }
  // Exp 3: N groups of 1,024-token prefixes, 100 requests, 20-token suffixes.
  const std::vector<uint32_t> groups =
      quick ? std::vector<uint32_t>{1, 5, 20, 100} : std::vector<uint32_t>{1, 2, 5, 10, 20, 50, 100};
  for (const uint32_t n : groups) {
    add("exp3", "groups=" + std::to_string(n), n, GroupBatch(100, n, 1024, 20, pool, seed++));
  }
  // Exp 4: binary radix tree of L levels over 2,048 tokens; 64 requests spread over the leaves.
  for (uint32_t levels = 1; levels <= 4; ++levels) {
    BatchBuilder b(seed++);
    const uint32_t segment = 2048 / levels / kBlockTokens * kBlockTokens;
    std::vector<std::vector<size_t>> level_nodes(levels);
    for (uint32_t l = 0; l < levels; ++l) {
      for (uint32_t node = 0; node < (1u << l); ++node) {
        level_nodes[l].push_back(b.AddSegment(segment));
      }
    }
    for (uint32_t r = 0; r < 64; ++r) {
      const uint32_t leaf = r % (1u << (levels - 1));
      std::vector<size_t> path;
      for (uint32_t l = 0; l < levels; ++l) path.push_back(level_nodes[l][leaf >> (levels - 1 - l)]);
      b.AddRequest(path, 20);
    }
    add("exp4", "levels=" + std::to_string(levels), levels, b.Finish(pool, true));
  }
  // Exp 5: batch size, one group vs five.
  const std::vector<uint32_t> sizes = quick ? std::vector<uint32_t>{1, 8, 32, 128}
                                            : std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128};
  for (const uint32_t g : {1u, 5u}) {
    for (const uint32_t b : sizes) {
      if (b < g) continue;
      add("exp5", "groups=" + std::to_string(g) + " batch=" + std::to_string(b), b,
          GroupBatch(b, g, 1024, 32, pool, seed++));
    }
  }
  // Exp 6: 8 groups × 32 requests decoded as k batches of 256 / k (groups kept together).
  for (const uint32_t k : {1u, 2u, 4u, 8u, 16u, 32u}) {
    const uint32_t size = 256 / k;
    const uint32_t groups_in_batch = std::max(1u, 8 / k);
    add("exp6", std::to_string(k) + "x" + std::to_string(size), k,
        GroupBatch(size, groups_in_batch, 1024, 20, pool, seed++), k);
  }
  return points;
}

// Every (point, cascade off/on) step measured `repetitions` times in interleaved passes by the
// harness (calib/harness.h), the two cascade settings of a point side by side, so the ratios the
// experiments are about compare steps taken at nearly the same moment rather than minutes apart
// on a VM whose speed drifts. Returns the measurements in [point][cascade] order.
std::vector<calib::StepMeasurement> MeasureAll(const std::vector<Point>& points,
                                               hw::CpuEngine* engines[2], const ModelConfig& model,
                                               int repetitions) {
  std::vector<calib::MeasuredEngine> measured_engines;
  for (int cascade = 0; cascade < 2; ++cascade) {
    measured_engines.push_back({engines[cascade], cascade == 1,
                                static_cast<uint32_t>(engines[cascade]->num_threads())});
  }
  std::vector<calib::HarnessStep> steps;
  for (const Point& point : points) {
    steps.push_back({&point.batch.plan, 0});
    steps.push_back({&point.batch.plan, 1});
  }
  calib::HarnessOptions options;
  options.repetitions = repetitions;
  options.perf_counters = true;
  options.after_pass = [&](int pass) {
    std::fprintf(stderr, "\r  pass %d/%d over %zu steps%s ", pass, repetitions, steps.size(),
                 pass == 0 ? " (warm-up)" : "");
  };
  return calib::MeasureSteps(measured_engines, steps, model, options);
}

struct Row {
  const Point* point;
  bool cascade;
  const calib::StepMeasurement* m;
};

double AttentionNs(const StepTiming& t) {
  return static_cast<double>(t.term(StepTerm::kDecodeAttention) + t.term(StepTerm::kCascadePrefix));
}

double Optional(const std::optional<uint64_t>& v) { return v ? static_cast<double>(*v) : -1.0; }

std::vector<hw::BenchTable> Tables(const std::vector<Row>& rows, const ModelConfig& model) {
  std::vector<hw::BenchTable> tables;
  const double kv = static_cast<double>(model.KvBytesPerToken());
  for (const Row& row : rows) {
    const Point& p = *row.point;
    if (tables.empty() || tables.back().name != p.experiment) {
      tables.push_back({});
      tables.back().name = p.experiment;
      for (const char* c : {"x", "cascade_enabled", "cascade_used", "requests", "batches",
                            "step_ms", "step_spread", "attention_ms", "gemm_ms", "decode_tok_s",
                            "kv_referenced_bytes", "kv_unique_bytes", "attention_gb_s",
                            "llc_loads", "llc_load_misses"}) {
        tables.back().column_names.emplace_back(c);
        tables.back().columns.emplace_back();
      }
      tables.back().attributes["variants"] = "";
      tables.back().attributes["missing_counter_value"] = "-1 (perf_event_open refused)";
    }
    hw::BenchTable& t = tables.back();
    t.attributes["variants"] += (t.attributes["variants"].empty() ? "" : ";") + p.variant;
    const StepTiming& s = row.m->row.measured;
    const double step_ns = static_cast<double>(s.total_ns);
    const double attention_ns = AttentionNs(s);
    const double referenced = static_cast<double>(p.batch.plan.decode_kv_tokens) * kv;
    const double values[] = {p.x,
                             row.cascade ? 1.0 : 0.0,
                             s.cascade_used ? 1.0 : 0.0,
                             static_cast<double>(p.batch.plan.num_requests()),
                             p.batches,
                             step_ns * 1e-6,
                             row.m->spread,
                             attention_ns * 1e-6,
                             static_cast<double>(s.term(StepTerm::kGemm)) * 1e-6,
                             static_cast<double>(p.batch.plan.decode_requests) / (step_ns * 1e-9),
                             referenced,
                             static_cast<double>(p.batch.plan.decode_kv_unique_tokens) * kv,
                             attention_ns > 0 ? referenced / attention_ns : 0.0,
                             Optional(row.m->counts.llc_loads),
                             Optional(row.m->counts.llc_load_misses)};
    for (size_t c = 0; c < t.columns.size(); ++c) t.columns[c].push_back(values[c]);
  }
  return tables;
}

void PrintSummary(std::ostream& out, const std::vector<Row>& rows) {
  out << std::left << std::setw(6) << "exp" << std::setw(26) << "variant" << std::setw(9)
      << "cascade" << std::right << std::setw(10) << "step ms" << std::setw(9) << "spread"
      << std::setw(10) << "attn ms"
      << std::setw(12) << "tok/s" << std::setw(12) << "LLC miss\n";
  for (const Row& row : rows) {
    const StepTiming& s = row.m->row.measured;
    out << std::left << std::setw(6) << row.point->experiment << std::setw(26)
        << row.point->variant << std::setw(9)
        << (row.cascade ? (s.cascade_used ? "on(used)" : "on") : "off") << std::right
        << std::fixed << std::setprecision(2) << std::setw(10) << static_cast<double>(s.total_ns) * 1e-6
        << std::setprecision(0) << std::setw(7) << row.m->spread * 100 << " %"
        << std::setprecision(2) << std::setw(10) << AttentionNs(s) * 1e-6 << std::setprecision(0) << std::setw(12)
        << row.point->batch.plan.decode_requests / (static_cast<double>(s.total_ns) * 1e-9)
        << std::setw(11) << Optional(row.m->counts.llc_load_misses) << '\n';
  }
}

std::string Csv(const std::vector<hw::BenchTable>& tables, const std::vector<Row>& rows) {
  std::ostringstream csv;
  csv << "experiment,variant";
  for (const std::string& c : tables.front().column_names) csv << ',' << c;
  csv << '\n' << std::setprecision(10);
  size_t row_index = 0;
  for (const hw::BenchTable& t : tables) {
    for (size_t r = 0; r < t.Rows(); ++r, ++row_index) {
      csv << t.name << ",\"" << rows[row_index].point->variant << '"';
      for (const auto& column : t.columns) csv << ',' << column[r];
      csv << '\n';
    }
  }
  return csv.str();
}

}  // namespace

int BenchExperimentsCommand(const BenchExperimentsOptions& options, std::ostream& out) {
  const ResolvedText model_text = ReadNamedFile(options.model, "scenarios/models", "model");
  const ModelConfig model = ParseModelConfig(model_text.text, model_text.display_name);
  const int threads = options.threads > 0 ? options.threads : hw::UsableThreads();
  const int repetitions = options.quick ? 3 : 7;
  // Pool: the largest experiment (exp2: 64 × 2,048 private tokens) plus room to scatter.
  const uint64_t pool = 16384;
  const std::vector<Point> points = Experiments(options.quick, pool);
  hw::CpuEngine without_cascade(model, pool, kBlockTokens,
                                hw::CpuEngineOptions{.num_threads = threads,
                                                     .cascade_attention = false});
  hw::CpuEngine with_cascade(model, pool, kBlockTokens,
                             hw::CpuEngineOptions{.num_threads = threads,
                                                  .cascade_attention = true});
  hw::CpuEngine* engines[2] = {&without_cascade, &with_cascade};
  const std::vector<calib::StepMeasurement> measured =
      MeasureAll(points, engines, model, repetitions);
  std::vector<Row> rows;
  for (const bool cascade : {false, true}) {
    for (size_t p = 0; p < points.size(); ++p) {
      rows.push_back({&points[p], cascade, &measured[2 * p + (cascade ? 1 : 0)]});
    }
  }
  std::fputc('\n', stderr);
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.point->experiment < b.point->experiment;
  });
  const std::vector<hw::BenchTable> tables = Tables(rows, model);
  fs::create_directories(options.out_dir);
  const HostInfo host = ReadHostInfo();
  hw::WriteBenchTables(fs::path(options.out_dir) / "experiments.h5", tables, host);
  WriteFileAtomically(fs::path(options.out_dir) / "experiments.csv", Csv(tables, rows));
  PrintSummary(out, rows);
  out << "wrote " << options.out_dir << "/experiments.h5 and experiments.csv\n";
  return 0;
}

}  // namespace feather
