// bench_experiments.cc: `feather bench experiments` (see bench_experiments.h).
#include "cli/bench_experiments.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/atomic_file.h"
#include "calib/bench_table.h"
#include "calib/harness.h"
#include "calib/paper_experiments.h"
#include "cli/selfcheck_command.h"
#if FEATHER_HAVE_CUDA
#include "hw/cuda/cuda_engine.h"
#include "hw/cuda/cuda_variables.h"
#include "hw/cuda/cupti_profiler.h"
#endif
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
constexpr uint32_t kBlockTokens = calib::kExperimentBlockTokens;
using calib::ExperimentPoint;

struct Row {
  const ExperimentPoint* point;
  bool cascade;
  const calib::StepMeasurement* m;
};

double AttentionNs(const StepTiming& t) {
  return static_cast<double>(t.term(StepTerm::kDecodeAttention) + t.term(StepTerm::kCascadePrefix));
}

double Optional(const std::optional<uint64_t>& v) { return v ? static_cast<double>(*v) : -1.0; }

// The CUDA target's CUPTI counters of a row's step (dram__bytes_read.sum, L2 hit rate).
struct RowCounters {
  double dram_bytes_read = -1;
  double l2_hit_rate = -1;
};

std::vector<hw::BenchTable> Tables(const std::vector<Row>& rows, const ModelConfig& model,
                                   const std::vector<RowCounters>* cupti = nullptr) {
  std::vector<hw::BenchTable> tables;
  const double kv = static_cast<double>(model.KvBytesPerToken());
  for (const Row& row : rows) {
    const ExperimentPoint& p = *row.point;
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
      if (cupti != nullptr) {
        for (const char* c : {"dram_bytes_read", "l2_hit_rate"}) {
          tables.back().column_names.emplace_back(c);
          tables.back().columns.emplace_back();
        }
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
    const size_t base_columns = sizeof values / sizeof values[0];
    for (size_t c = 0; c < base_columns; ++c) t.columns[c].push_back(values[c]);
    if (cupti != nullptr) {
      const RowCounters& counters = (*cupti)[static_cast<size_t>(&row - rows.data())];
      t.columns[base_columns].push_back(counters.dram_bytes_read);
      t.columns[base_columns + 1].push_back(counters.l2_hit_rate);
    }
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

int CpuExperiments(const BenchExperimentsOptions& options, std::ostream& out) {
  const ResolvedText model_text = ReadNamedFile(options.model, "scenarios/models", "model");
  const ModelConfig model = ParseModelConfig(model_text.text, model_text.display_name);
  const int threads = options.threads > 0 ? options.threads : hw::UsableThreads();
  const int repetitions = options.quick ? 3 : 7;
  // Pool: the largest experiment (exp2: 64 × 2,048 private tokens) plus room to scatter.
  const uint64_t pool = 16384;
  const std::vector<ExperimentPoint> points = calib::PaperExperiments(options.quick, pool);
  hw::CpuEngine without_cascade(model, pool, kBlockTokens,
                                hw::CpuEngineOptions{.num_threads = threads,
                                                     .cascade_attention = false});
  hw::CpuEngine with_cascade(model, pool, kBlockTokens,
                             hw::CpuEngineOptions{.num_threads = threads,
                                                  .cascade_attention = true});
  Engine* engines[2] = {&without_cascade, &with_cascade};
  const std::vector<calib::StepMeasurement> measured =
      calib::MeasureExperiments(points, engines, static_cast<uint32_t>(with_cascade.num_threads()),
                                model, repetitions);
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

#if FEATHER_HAVE_CUDA
// The experiments on CudaEngines, each row's step then run once more under CUPTI's range
// profiler for its DRAM bytes and L2 hit rate. Run on an H100 once (results/cuda-h100/).
int CudaExperiments(const BenchExperimentsOptions& options, std::ostream& out) {
  const ResolvedText model_text = ReadNamedFile(options.model, "scenarios/models", "model");
  const ModelConfig model = ParseModelConfig(model_text.text, model_text.display_name);
  const int repetitions = options.quick ? 3 : 7;
  const uint64_t pool = 16384;
  const std::vector<ExperimentPoint> points = calib::PaperExperiments(options.quick, pool);
  // One engine seen with cascade off and on: two would hold the weights and the pool twice
  // (an 8B model's 16 GB of weights and 32 GB pool fit an 80 GB GPU once, not twice).
  hw::cuda::CudaEngine cuda_engine(model, pool, kBlockTokens);
  hw::cuda::CudaEngineCascadeView without_cascade(cuda_engine, false);
  hw::cuda::CudaEngineCascadeView with_cascade(cuda_engine, true);
  Engine* engines[2] = {&without_cascade, &with_cascade};
  const std::vector<calib::StepMeasurement> measured = calib::MeasureExperiments(
      points, engines, static_cast<uint32_t>(cuda_engine.sm_count()), model, repetitions);
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
  std::vector<RowCounters> counters(rows.size());
  {
    hw::cuda::CuptiRangeProfiler profiler;
    for (size_t i = 0; i < rows.size(); ++i) {
      Engine& engine = *engines[rows[i].cascade ? 1 : 0];
      const hw::cuda::CuptiCounters c = profiler.Measure(
          rows[i].point->experiment + " " + rows[i].point->variant,
          [&] { (void)engine.Execute(rows[i].point->batch.plan); });
      counters[i] = {c.dram_bytes_read, c.l2_hit_rate};
    }
  }
  const std::vector<hw::BenchTable> tables = Tables(rows, model, &counters);
  fs::create_directories(options.out_dir);
  const HostInfo host = ReadHostInfo();
  hw::WriteBenchTables(fs::path(options.out_dir) / "experiments.h5", tables, host);
  WriteFileAtomically(fs::path(options.out_dir) / "experiments.csv", Csv(tables, rows));
  PrintSummary(out, rows);
  out << "wrote " << options.out_dir << "/experiments.h5 and experiments.csv (CUDA, "
      << hw::cuda::CudaKernelChoices()
      << ", with CUPTI dram_bytes_read and l2_hit_rate per point)\n";
  return 0;
}
#endif

}  // namespace

int BenchExperimentsCommand(const BenchExperimentsOptions& options, std::ostream& out) {
  if (options.target == "cuda") {
    if (const std::string why = CudaTargetGate(); !why.empty()) {
      std::cerr << "feather bench experiments --target cuda: " << why << '\n';
      return 2;
    }
#if FEATHER_HAVE_CUDA
    return CudaExperiments(options, out);
#else
    std::cerr << "feather bench experiments --target cuda: this feather was built without CUDA\n";
    return 2;
#endif
  }
  if (options.target != "cpu") {
    throw std::invalid_argument("--target must be cpu or cuda, got '" + options.target + "'");
  }
  return CpuExperiments(options, out);
}

}  // namespace feather
