// published_rows.cc: rows from published measurements (see published_rows.h).
#include "calib/published_rows.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <utility>

#include "base/input_error.h"
#include "base/input_text.h"
#include "calib/rows_csv.h"

namespace feather::calib {
namespace {

constexpr std::string_view kDecodeMagic = "# feather published-decode-attention v1";
constexpr std::string_view kRatioMagic = "# feather published-ratios v1";
constexpr std::string_view kVidurGemmOps[] = {"attn_pre_proj", "attn_post_proj", "mlp_up_proj",
                                              "mlp_down_proj"};
constexpr std::string_view kVidurLeftOutOps[] = {"input_layernorm", "post_attention_layernorm",
                                                 "attn_rope", "mlp_act", "add", "emb"};
constexpr double kNsPerMs = 1e6;
constexpr double kAboutTolerance = 0.25;

using Problems = CappedInputProblems;

bool Blank(std::string_view line) { return line.find_first_not_of(" \t") == std::string::npos; }

// A CSV table: '#' lines and blank lines skipped, then a header, then rows of as many cells.
struct Table {
  std::vector<std::string> header;
  uint32_t header_line = 0;
  struct Row {
    uint32_t line = 0;
    std::vector<std::string> cells;
  };
  std::vector<Row> rows;

  // The column's index; a problem of the header line when it is missing.
  [[nodiscard]] std::optional<size_t> Column(std::string_view name, Problems& problems) const {
    std::optional<size_t> found;
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] != name) continue;
      if (found) problems.Add(header_line, std::string(name), "column given twice");
      found = i;
    }
    if (!found) problems.Add(header_line, std::string(name), "missing column");
    return found;
  }
};

Table ReadTable(std::string_view text, Problems& problems) {
  Table table;
  const std::vector<std::string_view> lines = SplitLines(text);
  for (size_t n = 0; n < lines.size(); ++n) {
    const auto line = static_cast<uint32_t>(n + 1);
    if (Blank(lines[n]) || lines[n].front() == '#') continue;
    const std::optional<std::vector<std::string>> cells = SplitCsvCells(lines[n]);
    if (!cells) {
      problems.Add(line, "", "unterminated quote");
      continue;
    }
    if (table.header.empty()) {
      table.header = *cells;
      table.header_line = line;
      continue;
    }
    if (cells->size() != table.header.size()) {
      problems.Add(line, "", std::to_string(cells->size()) + " cells, the header has " +
                                 std::to_string(table.header.size()));
      continue;
    }
    table.rows.push_back({line, *cells});
  }
  if (table.header.empty()) {
    problems.Add(static_cast<uint32_t>(lines.size()), "", "no header line");
  } else if (table.rows.empty() && problems.empty()) {
    problems.Add(static_cast<uint32_t>(lines.size()), "", "no rows after the header");
  }
  return table;
}

// A finite number in [min, ∞) (> min when `exclusive`), or nullopt with a problem.
std::optional<double> Number(const Table::Row& row, size_t column, std::string_view name,
                             double min, bool exclusive, Problems& problems) {
  const std::string& cell = row.cells[column];
  double value = 0;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  const bool below = exclusive ? !(value > min) : !(value >= min);
  if (ec != std::errc() || end != cell.data() + cell.size() || !std::isfinite(value) || below) {
    problems.Add(row.line, std::string(name),
                 "expected a finite number " + std::string(exclusive ? "> " : ">= ") +
                     (min == 0 ? "0" : std::to_string(min)) + ", got '" + cell + "'");
    return std::nullopt;
  }
  return value;
}

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace

// --- (a) Vidur ---

std::vector<PublishedTermRow> ParseVidurMlpCsv(std::string_view text,
                                               const std::string& display_name,
                                               std::string_view device) {
  Problems problems(display_name);
  const Table table = ReadTable(text, problems);
  problems.ThrowIfAny();
  auto median = [&](std::string_view op) {
    return table.Column("time_stats." + std::string(op) + ".median", problems);
  };
  std::vector<std::optional<size_t>> gemm_cols, left_cols;
  for (const std::string_view op : kVidurGemmOps) gemm_cols.push_back(median(op));
  for (const std::string_view op : kVidurLeftOutOps) left_cols.push_back(median(op));
  const std::array<std::string_view, 8> dim_names = {
      "n_head",   "n_kv_head",  "n_embd",     "n_expanded_embd",
      "vocab_size", "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers"};
  std::array<std::optional<size_t>, 8> dims;
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = table.Column(dim_names[i], problems);
  problems.ThrowIfAny();

  std::vector<PublishedTermRow> rows;
  for (const Table::Row& row : table.rows) {
    std::array<double, 8> d{};
    bool ok = true;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dim_names[i] == "use_gated_mlp") continue;
      const std::optional<double> v = Number(row, *dims[i], dim_names[i], 0, true, problems);
      if (!v) {
        ok = false;
      } else if (*v != std::floor(*v) || *v > 1e9) {
        problems.Add(row.line, std::string(dim_names[i]),
                     "expected a whole number, got '" + row.cells[*dims[i]] + "'");
        ok = false;
      } else {
        d[i] = *v;
      }
    }
    const std::string& gated = row.cells[*dims[5]];
    if (gated != "True" && gated != "true") {
      problems.Add(row.line, "use_gated_mlp",
                   "expected True (the cost model counts a gated MLP: gate, up, down), got '" +
                       gated + "'");
      ok = false;
    }
    double gemm_ms = 0, left_ms = 0;
    for (size_t i = 0; i < gemm_cols.size(); ++i) {
      const std::string name = "time_stats." + std::string(kVidurGemmOps[i]) + ".median";
      const std::optional<double> v = Number(row, *gemm_cols[i], name, 0, true, problems);
      ok = ok && v.has_value();
      gemm_ms += v.value_or(0);
    }
    for (size_t i = 0; i < left_cols.size(); ++i) {
      const std::string name = "time_stats." + std::string(kVidurLeftOutOps[i]) + ".median";
      const std::optional<double> v = Number(row, *left_cols[i], name, 0, false, problems);
      ok = ok && v.has_value();
      left_ms += v.value_or(0);
    }
    if (!ok) continue;
    const auto heads = static_cast<uint32_t>(d[0]), kv_heads = static_cast<uint32_t>(d[1]);
    const auto hidden = static_cast<uint32_t>(d[2]), expanded = static_cast<uint32_t>(d[3]);
    const auto tokens = d[6];
    const auto tp = static_cast<uint32_t>(d[7]);
    auto divides = [&](uint32_t value, uint32_t by, const char* what, const char* column) {
      if (value % by == 0) return true;
      problems.Add(row.line, column,
                   std::string(what) + " " + std::to_string(value) + " is not divisible by " +
                       std::to_string(by));
      ok = false;
      return false;
    };
    divides(hidden, heads, "n_embd", "n_head");
    divides(heads, tp, "n_head", "num_tensor_parallel_workers");
    divides(kv_heads, tp, "n_kv_head", "num_tensor_parallel_workers");
    divides(expanded, tp, "n_expanded_embd", "num_tensor_parallel_workers");
    if (!ok) continue;

    PublishedTermRow out;
    out.device = std::string(device);
    out.tensor_parallel = tp;
    ModelConfig& m = out.model;
    m.name = "vidur-shard h" + std::to_string(hidden) + " i" + std::to_string(expanded) + " q" +
             std::to_string(heads) + " kv" + std::to_string(kv_heads) + " tp" + std::to_string(tp);
    m.source = display_name + " (one layer on one of " + std::to_string(tp) + " GPUs, no LM head)";
    m.layers = 1;
    m.hidden = hidden;
    m.heads = heads / tp;
    m.kv_heads = kv_heads / tp;
    m.head_dim = hidden / heads;
    m.intermediate = expanded / tp;
    m.vocab = 0;
    m.dtype_bytes = 2;
    out.step.shape.requests = 1;
    out.step.shape.prefill_requests = 1;
    out.step.shape.new_tokens = tokens;
    out.step.measured.term_ns[static_cast<size_t>(StepTerm::kGemm)] =
        std::llround(gemm_ms * kNsPerMs);
    out.label = "vidur " + out.device + " tp" + std::to_string(tp) + " tokens=" +
                Format("%.0f", tokens) + " gemm " + Format("%.6g", gemm_ms) +
                " ms/layer (norms, rope, act, add, emb " + Format("%.4g", left_ms) +
                " ms left out)";
    out.citation = display_name + ":" + std::to_string(row.line);
    rows.push_back(std::move(out));
  }
  problems.ThrowIfAny();
  return rows;
}

// --- (b) decode-attention points ---

std::vector<PublishedTermRow> ParseDecodePointsCsv(std::string_view text,
                                                   const std::string& display_name) {
  Problems problems(display_name);
  const Table table = ReadTable(text, problems);
  problems.ThrowIfAny();
  const std::array<std::string_view, 10> names = {
      "id",    "device",         "kernel",  "kv_heads",           "head_dim",
      "batch", "context_tokens", "time_us", "achieved_bytes_per_s", "source"};
  std::array<std::optional<size_t>, 10> col;
  for (size_t i = 0; i < names.size(); ++i) col[i] = table.Column(names[i], problems);
  std::optional<size_t> dtype = table.Column("dtype_bytes", problems);
  problems.ThrowIfAny();
  std::vector<PublishedTermRow> rows;
  for (const Table::Row& row : table.rows) {
    bool ok = true;
    auto number = [&](size_t i, bool optional_cell) -> std::optional<double> {
      if (optional_cell && row.cells[*col[i]].empty()) return std::nullopt;
      std::optional<double> v = Number(row, *col[i], names[i], 0, true, problems);
      ok = ok && v.has_value();
      return v;
    };
    const std::optional<double> kv_heads = number(3, false), head_dim = number(4, false);
    const std::optional<double> batch = number(5, false), context = number(6, false);
    const std::optional<double> time_us = number(7, true), bandwidth = number(8, true);
    const std::optional<double> bytes =
        Number(row, *dtype, "dtype_bytes", 0, true, problems);
    ok = ok && bytes.has_value();
    for (size_t i : {size_t{0}, size_t{1}, size_t{2}, size_t{9}}) {
      if (row.cells[*col[i]].empty()) {
        problems.Add(row.line, std::string(names[i]), "must not be empty");
        ok = false;
      }
    }
    if (ok && time_us.has_value() == bandwidth.has_value()) {
      problems.Add(row.line, "time_us",
                   "give exactly one of time_us and achieved_bytes_per_s");
      ok = false;
    }
    if (!ok) continue;
    const double kv_per_token = 2 * *kv_heads * *head_dim * *bytes;  // one layer
    const double kv_read = *batch * *context * kv_per_token;
    const double ns = time_us ? *time_us * 1e3 : kv_read / *bandwidth * 1e9;
    PublishedTermRow out;
    out.device = row.cells[*col[1]];
    ModelConfig& m = out.model;
    m.name = "decode-point kv" + Format("%.0f", *kv_heads) + " d" + Format("%.0f", *head_dim);
    m.source = display_name + ":" + std::to_string(row.line);
    m.layers = 1;
    m.kv_heads = static_cast<uint32_t>(*kv_heads);
    m.heads = m.kv_heads;
    m.head_dim = static_cast<uint32_t>(*head_dim);
    m.hidden = m.heads * m.head_dim;
    m.dtype_bytes = static_cast<uint32_t>(*bytes);
    StepShape& s = out.step.shape;
    s.requests = s.decode_requests = *batch;
    s.decode_kv_tokens = s.decode_kv_unique_tokens = *batch * *context;
    out.step.measured.term_ns[static_cast<size_t>(StepTerm::kDecodeAttention)] = std::llround(ns);
    out.label = row.cells[*col[0]] + ": " + row.cells[*col[2]] + ", batch " +
                Format("%.0f", *batch) + " x " + Format("%.0f", *context) + " tokens, " +
                Format("%.4g", ns / 1e3) + " us (" + Format("%.3g", kv_read / ns) + " GB/s)";
    out.citation = display_name + ":" + std::to_string(row.line) + " (" + row.cells[*col[9]] + ")";
    rows.push_back(std::move(out));
  }
  problems.ThrowIfAny();
  return rows;
}

MeasuredStep RestateDecodeRow(const PublishedTermRow& row, const ModelConfig& model) {
  const double source = static_cast<double>(row.model.KvBytesPerToken());
  const double target = static_cast<double>(model.KvBytesPerToken());
  const double scale = target > 0 ? source / target : 0;
  MeasuredStep step = row.step;
  StepShape& s = step.shape;
  s.requests *= scale;
  s.decode_requests *= scale;
  s.decode_kv_tokens *= scale;
  s.decode_kv_unique_tokens *= scale;
  return step;
}

// --- ratio rows ---

std::string_view RatioRelationName(RatioRelation relation) {
  switch (relation) {
    case RatioRelation::kAbout:
      return "about";
    case RatioRelation::kAtLeast:
      return "at_least";
    case RatioRelation::kAtMost:
      return "at_most";
  }
  return "unknown";
}

std::vector<RatioRow> ParseRatioRowsCsv(std::string_view text, const std::string& display_name) {
  Problems problems(display_name);
  const Table table = ReadTable(text, problems);
  problems.ThrowIfAny();
  const std::array<std::string_view, 16> names = {
      "id",          "device",       "model",         "quantity",
      "a_requests",  "a_context_tokens", "a_unique_kv_tokens", "a_cascade_prefix_tokens",
      "b_requests",  "b_context_tokens", "b_unique_kv_tokens", "b_cascade_prefix_tokens",
      "measured",    "relation",     "source",        "quote"};
  std::array<std::optional<size_t>, 16> col;
  for (size_t i = 0; i < names.size(); ++i) col[i] = table.Column(names[i], problems);
  problems.ThrowIfAny();
  std::vector<RatioRow> rows;
  for (const Table::Row& row : table.rows) {
    bool ok = true;
    RatioRow out;
    const std::string& cell_of = row.cells[*col[0]];
    out.id = cell_of;
    out.device = row.cells[*col[1]];
    out.model = row.cells[*col[2]];
    for (size_t i : {size_t{0}, size_t{1}, size_t{2}, size_t{14}, size_t{15}}) {
      if (row.cells[*col[i]].empty()) {
        problems.Add(row.line, std::string(names[i]), "must not be empty");
        ok = false;
      }
    }
    const std::string& quantity = row.cells[*col[3]];
    if (quantity == "step_time") {
      out.quantity = RatioQuantity::kStepTime;
    } else if (quantity == "attention_time") {
      out.quantity = RatioQuantity::kAttentionTime;
    } else {
      problems.Add(row.line, "quantity",
                   "expected step_time | attention_time, got '" + quantity + "'");
      ok = false;
    }
    const std::string& relation = row.cells[*col[13]];
    if (relation == "about") {
      out.relation = RatioRelation::kAbout;
    } else if (relation == "at_least") {
      out.relation = RatioRelation::kAtLeast;
    } else if (relation == "at_most") {
      out.relation = RatioRelation::kAtMost;
    } else {
      problems.Add(row.line, "relation",
                   "expected about | at_least | at_most, got '" + relation + "'");
      ok = false;
    }
    auto batch = [&](size_t first, DecodeBatch& b) {
      const std::optional<double> r = Number(row, *col[first], names[first], 0, true, problems);
      const std::optional<double> c =
          Number(row, *col[first + 1], names[first + 1], 0, true, problems);
      const std::optional<double> u =
          Number(row, *col[first + 2], names[first + 2], 0, true, problems);
      const std::optional<double> p =
          Number(row, *col[first + 3], names[first + 3], 0, false, problems);
      if (!r || !c || !u || !p) {
        ok = false;
        return;
      }
      b = {*r, *c, *u, *p};
      if (*u > *r * *c || *u < *c) {
        problems.Add(row.line, std::string(names[first + 2]),
                     "distinct KV tokens must lie between context_tokens and requests × "
                     "context_tokens");
        ok = false;
      } else if (*p >= *c) {
        problems.Add(row.line, std::string(names[first + 3]),
                     "the cascade prefix must be shorter than the context");
        ok = false;
      }
    };
    batch(4, out.a);
    batch(8, out.b);
    const std::optional<double> measured = Number(row, *col[12], "measured", 0, true, problems);
    if (!measured) ok = false;
    if (!ok) continue;
    out.measured = *measured;
    out.citation = display_name + ":" + std::to_string(row.line) + " (" + row.cells[*col[14]] +
                   ": \"" + row.cells[*col[15]] + "\")";
    rows.push_back(std::move(out));
  }
  problems.ThrowIfAny();
  return rows;
}

StepShape DecodeShape(const DecodeBatch& batch) {
  StepShape s;
  s.requests = s.decode_requests = s.new_tokens = s.sampled_tokens = batch.requests;
  s.cascade_prefix_tokens = batch.cascade_prefix_tokens;
  s.decode_kv_tokens = batch.requests * (batch.context_tokens - batch.cascade_prefix_tokens);
  s.decode_kv_unique_tokens = batch.unique_kv_tokens - batch.cascade_prefix_tokens;
  return s;
}

RatioCheck CheckRatio(const RatioRow& row, const StepPricer& pricer) {
  auto per_token_ns = [&](const DecodeBatch& batch) {
    const std::array<double, kNumStepTerms> t = pricer.Terms(DecodeShape(batch));
    double ns = 0;
    if (row.quantity == RatioQuantity::kStepTime) {
      for (const double term : t) ns += term;
    } else {
      for (const StepTerm term :
           {StepTerm::kDecodeAttention, StepTerm::kKvReuse, StepTerm::kCascadePrefix}) {
        ns += t[static_cast<size_t>(term)];
      }
    }
    return ns / batch.requests;
  };
  RatioCheck check;
  check.predicted = per_token_ns(row.a) / per_token_ns(row.b);
  check.rel_error = check.predicted / row.measured - 1;
  switch (row.relation) {
    case RatioRelation::kAbout:
      check.consistent = std::abs(check.rel_error) <= kAboutTolerance;
      break;
    case RatioRelation::kAtLeast:
      check.consistent = check.predicted >= row.measured;
      break;
    case RatioRelation::kAtMost:
      check.consistent = check.predicted <= row.measured;
      break;
  }
  return check;
}

RowsFileKind DetectRowsFileKind(std::string_view text, const std::string& display_name) {
  const std::vector<std::string_view> lines = SplitLines(text.substr(0, 1 << 16));
  const std::string_view first = lines.empty() ? std::string_view() : lines.front();
  if (first == kDecodeMagic) return RowsFileKind::kDecodePoints;
  if (first == kRatioMagic) return RowsFileKind::kRatios;
  if (first.starts_with("label,") || first.starts_with("\"label\",")) {
    return RowsFileKind::kCalibrationRows;
  }
  if (first.find("time_stats.attn_pre_proj.median") != std::string_view::npos) {
    return RowsFileKind::kVidurMlp;
  }
  throw InputError(display_name, 1, "",
                   "not a rows file: expected calibration rows (a header starting 'label,'), a "
                   "Vidur mlp.csv, or a first line '" +
                       std::string(kDecodeMagic) + "' or '" + std::string(kRatioMagic) + "'");
}

}  // namespace feather::calib
