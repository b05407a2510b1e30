// trace_stats.cc: statistics of a request trace (trace_stats.h).
#include "cli/trace_stats.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace feather {
namespace {

Distribution Distribute(std::vector<uint64_t> values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  long double sum = 0;
  for (const uint64_t v : values) sum += static_cast<long double>(v);
  d.mean = static_cast<double>(sum / static_cast<long double>(values.size()));
  auto rank = [&](double p) {
    const auto n = static_cast<double>(values.size());
    const auto index = static_cast<size_t>(std::max(1.0, std::ceil(p * n))) - 1;
    return values[std::min(index, values.size() - 1)];
  };
  d.min = values.front();
  d.p50 = rank(0.50);
  d.p90 = rank(0.90);
  d.p99 = rank(0.99);
  d.max = values.back();
  return d;
}

// A round bin length giving about 20 bins over `duration_s`.
double AutoBin(double duration_s) {
  constexpr double kSteps[] = {1,   2,   5,   10,   15,   30,   60,    120,   180,
                               300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400};
  const double target = duration_s / 20.0;
  for (const double s : kSteps) {
    if (s >= target) return s;
  }
  return std::ceil(target / 86400.0) * 86400.0;
}

nlohmann::ordered_json ToJson(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"min", d.min}, {"p50", d.p50},
          {"p90", d.p90},     {"p99", d.p99},   {"max", d.max}};
}

std::string Thousands(uint64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return digits;
}

std::string Fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

// One decimal, thousands separated: 12,035.1.
std::string Mean(double value) {
  const std::string text = Fixed(value, 1);  // rounded first: 12035.96 -> "12036.0"
  const size_t dot = text.find('.');
  if (value < 0 || dot == std::string::npos) return text;
  return Thousands(std::stoull(text.substr(0, dot))) + text.substr(dot);
}

}  // namespace

TraceStats ComputeTraceStats(const MooncakeTrace& trace, const std::string& file,
                             const TraceStatsOptions& options) {
  TraceStats s;
  s.file = file;
  s.block_tokens = options.block_tokens;
  s.requests = trace.size();
  if (trace.size() == 0) return s;

  // Arrivals.
  const int64_t first_ms = trace.records.front().timestamp_ms;
  const int64_t last_ms = trace.records.back().timestamp_ms;
  s.duration_s = static_cast<double>(last_ms - first_ms) * 1e-3;
  s.mean_rate_per_s = s.duration_s > 0 ? static_cast<double>(s.requests) / s.duration_s : 0;
  s.bin_s = options.bin_s > 0 ? options.bin_s : AutoBin(s.duration_s);
  if (s.duration_s / s.bin_s >= static_cast<double>(kMaxRateBins)) {
    std::ostringstream why;
    why << "--bin-s: a bin of " << s.bin_s << " s cuts the trace's " << s.duration_s
        << " s into more than " << kMaxRateBins << " bins; give at least "
        << s.duration_s / static_cast<double>(kMaxRateBins - 1);
    throw std::invalid_argument(why.str());
  }
  const auto bins = static_cast<size_t>(std::floor(s.duration_s / s.bin_s)) + 1;
  s.requests_per_bin.assign(bins, 0);
  uint64_t run = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const int64_t t = trace.records[i].timestamp_ms;
    const auto bin = static_cast<size_t>(static_cast<double>(t - first_ms) * 1e-3 / s.bin_s);
    ++s.requests_per_bin[std::min(bin, bins - 1)];
    if (i == 0 || t != trace.records[i - 1].timestamp_ms) {
      ++s.distinct_timestamps;
      run = 0;
    }
    s.max_requests_per_timestamp = std::max(s.max_requests_per_timestamp, ++run);
  }

  // Lengths.
  std::vector<uint64_t> input, output;
  input.reserve(trace.size());
  output.reserve(trace.size());
  for (const TraceRecord& r : trace.records) {
    input.push_back(r.input_tokens);
    output.push_back(r.output_tokens);
    s.total_input_tokens += r.input_tokens;
    s.total_output_tokens += r.output_tokens;
  }
  s.input_tokens = Distribute(std::move(input));
  s.output_tokens = Distribute(std::move(output));

  // Sharing, in trace order with an unbounded cache.
  std::unordered_set<uint64_t> seen;
  seen.reserve(trace.block_ids.size());
  std::unordered_set<uint64_t> first_blocks;
  uint64_t shared = 0, after_first = 0, shared_after_first = 0, reusable_tokens = 0;
  uint64_t reuse_1 = 0, reuse_2 = 0;
  std::vector<uint64_t> leading;
  leading.reserve(trace.size());
  constexpr uint32_t kDepths[] = {1, 2, 4, 8, 16, 32, 64, 128};
  std::vector<std::unordered_map<uint64_t, uint64_t>> at_depth(std::size(kDepths));
  for (size_t i = 0; i < trace.size(); ++i) {
    const std::span<const uint64_t> blocks = trace.Blocks(i);
    if (!blocks.empty()) first_blocks.insert(blocks.front());
    uint64_t lead = 0;
    bool leading_run = true;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const bool before = seen.count(blocks[b]) != 0;
      if (before) ++shared;
      if (b > 0) {
        ++after_first;
        if (before) ++shared_after_first;
      }
      if (leading_run && before) {
        ++lead;
      } else {
        leading_run = false;
      }
    }
    for (size_t b = 0; b < blocks.size(); ++b) seen.insert(blocks[b]);
    for (size_t d = 0; d < std::size(kDepths); ++d) {
      if (blocks.size() >= kDepths[d]) ++at_depth[d][blocks[kDepths[d] - 1]];
    }
    s.blocks += blocks.size();
    reusable_tokens +=
        std::min<uint64_t>(lead * options.block_tokens, trace.records[i].input_tokens);
    if (lead >= 1) ++reuse_1;
    if (lead >= 2) ++reuse_2;
    leading.push_back(lead);
  }
  s.unique_blocks = seen.size();
  s.distinct_first_blocks = first_blocks.size();
  const auto fraction = [](uint64_t part, uint64_t whole) {
    return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
  };
  s.shared_block_fraction = fraction(shared, s.blocks);
  s.shared_block_fraction_after_first = fraction(shared_after_first, after_first);
  s.shared_token_fraction = fraction(reusable_tokens, s.total_input_tokens);
  s.requests_reusing_1_plus = fraction(reuse_1, s.requests);
  s.requests_reusing_2_plus = fraction(reuse_2, s.requests);

  // Histogram of the reused leading depth: 0, 1, 2-3, 4-7, ... (powers of two).
  uint64_t max_lead = 0;
  for (const uint64_t l : leading) max_lead = std::max(max_lead, l);
  std::vector<uint64_t> buckets;
  for (const uint64_t l : leading) {
    const size_t bucket = l == 0 ? 0 : static_cast<size_t>(std::bit_width(l));
    if (buckets.size() <= bucket) buckets.resize(bucket + 1, 0);
    ++buckets[bucket];
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::string label;
    if (b == 0) {
      label = "0";
    } else if (b == 1) {
      label = "1";
    } else {
      label = std::to_string(uint64_t{1} << (b - 1)) + "-" + std::to_string((uint64_t{1} << b) - 1);
    }
    s.reused_depth_histogram.emplace_back(label, buckets[b]);
  }
  s.reused_leading_blocks = Distribute(std::move(leading));

  for (size_t d = 0; d < std::size(kDepths); ++d) {
    SharingDepth depth;
    depth.depth_blocks = kDepths[d];
    depth.distinct = at_depth[d].size();
    for (const auto& [id, count] : at_depth[d]) {
      depth.requests += count;
      if (count >= 2) depth.shared_requests += count;
    }
    if (depth.requests == 0) break;
    s.depths.push_back(depth);
  }
  return s;
}

nlohmann::ordered_json TraceStatsToJson(const TraceStats& s) {
  using J = nlohmann::ordered_json;
  J histogram = J::array();
  for (const auto& [label, count] : s.reused_depth_histogram) {
    histogram.push_back({{"blocks", label}, {"requests", count}});
  }
  J depths = J::array();
  for (const SharingDepth& d : s.depths) {
    depths.push_back({{"depth_blocks", d.depth_blocks},
                      {"requests", d.requests},
                      {"distinct_prefixes", d.distinct},
                      {"shared_requests", d.shared_requests}});
  }
  return {{"file", s.file},
          {"block_tokens", s.block_tokens},
          {"requests", s.requests},
          {"duration_s", s.duration_s},
          {"mean_rate_per_s", s.mean_rate_per_s},
          {"distinct_timestamps", s.distinct_timestamps},
          {"max_requests_per_timestamp", s.max_requests_per_timestamp},
          {"rate_over_time", {{"bin_s", s.bin_s}, {"requests_per_bin", s.requests_per_bin}}},
          {"input_tokens", ToJson(s.input_tokens)},
          {"output_tokens", ToJson(s.output_tokens)},
          {"total_input_tokens", s.total_input_tokens},
          {"total_output_tokens", s.total_output_tokens},
          {"sharing",
           {{"blocks", s.blocks},
            {"unique_blocks", s.unique_blocks},
            {"shared_block_fraction", s.shared_block_fraction},
            {"shared_token_fraction", s.shared_token_fraction},
            {"shared_block_fraction_after_first_block", s.shared_block_fraction_after_first},
            {"distinct_first_blocks", s.distinct_first_blocks},
            {"requests_reusing_1_plus_blocks", s.requests_reusing_1_plus},
            {"requests_reusing_2_plus_blocks", s.requests_reusing_2_plus},
            {"reused_leading_blocks", ToJson(s.reused_leading_blocks)},
            {"reused_leading_blocks_histogram", histogram},
            {"depths", depths}}}};
}

void PrintTraceStats(std::ostream& out, const TraceStats& s) {
  auto dist = [&](const char* label, const Distribution& d) {
    out << "  " << std::left << std::setw(14) << label << std::right << "mean " << Mean(d.mean)
        << "  min " << Thousands(d.min) << "  p50 " << Thousands(d.p50) << "  p90 "
        << Thousands(d.p90) << "  p99 " << Thousands(d.p99) << "  max " << Thousands(d.max) << '\n';
  };
  out << "trace " << s.file << " (" << s.block_tokens << "-token blocks)\n"
      << "requests          " << Thousands(s.requests) << '\n'
      << "duration          " << Fixed(s.duration_s, 1) << " s (" << Fixed(s.duration_s / 60, 1)
      << " min), mean rate " << Fixed(s.mean_rate_per_s, 2) << " req/s\n"
      << "arrival instants  " << Thousands(s.distinct_timestamps) << " distinct timestamps, up to "
      << s.max_requests_per_timestamp << " requests at one\n\n"
      << "rate over time (" << Fixed(s.bin_s, 0) << " s bins):\n";
  uint64_t peak = 1;
  for (const uint64_t c : s.requests_per_bin) peak = std::max(peak, c);
  for (size_t i = 0; i < s.requests_per_bin.size(); ++i) {
    const uint64_t c = s.requests_per_bin[i];
    const auto bar =
        static_cast<size_t>(std::lround(40.0 * static_cast<double>(c) / static_cast<double>(peak)));
    out << "  " << std::setw(7) << Fixed(static_cast<double>(i) * s.bin_s, 0) << " s  "
        << std::setw(6) << c << " req  " << std::setw(7)
        << Fixed(static_cast<double>(c) / s.bin_s, 2) << " req/s  " << std::string(bar, '#')
        << '\n';
  }
  out << "\nlengths (tokens):\n";
  dist("input", s.input_tokens);
  dist("output", s.output_tokens);
  out << "  total input " << Thousands(s.total_input_tokens) << ", output "
      << Thousands(s.total_output_tokens) << "\n\n"
      << "prefix sharing (trace order, unbounded cache):\n"
      << "  blocks                       " << Thousands(s.blocks) << " ("
      << Thousands(s.unique_blocks) << " unique)\n"
      << "  blocks seen before           " << Fixed(s.shared_block_fraction, 3) << '\n'
      << "  same, token-weighted         " << Fixed(s.shared_token_fraction, 3) << '\n'
      << "  same, without block 0        " << Fixed(s.shared_block_fraction_after_first, 3) << '\n'
      << "  distinct first blocks        " << Thousands(s.distinct_first_blocks) << '\n'
      << "  requests reusing >= 1 block  " << Fixed(100 * s.requests_reusing_1_plus, 2) << " %\n"
      << "  requests reusing >= 2 blocks " << Fixed(100 * s.requests_reusing_2_plus, 2) << " %\n";
  dist("reused depth", s.reused_leading_blocks);
  out << "  reused leading blocks per request:";
  for (const auto& [label, count] : s.reused_depth_histogram) {
    out << "  " << label << ": " << Thousands(count);
  }
  out << "\n  depth (blocks)  requests  distinct prefixes  requests sharing theirs\n";
  for (const SharingDepth& d : s.depths) {
    out << "  " << std::setw(14) << d.depth_blocks << "  " << std::setw(8) << d.requests << "  "
        << std::setw(17) << d.distinct << "  " << std::setw(10) << d.shared_requests << " ("
        << Fixed(d.requests == 0 ? 0.0
                                 : 100.0 * static_cast<double>(d.shared_requests) /
                                       static_cast<double>(d.requests),
                 1)
        << " %)\n";
  }
}

double ParseBinSeconds(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value) || value <= 0) {
    throw std::invalid_argument("--bin-s: expected a positive number of seconds, got '" + text +
                                "'");
  }
  return value;
}

int TraceStatsCommand(const TraceStatsCommandOptions& options, std::ostream& out) {
  TraceStatsOptions stats_options = options.stats;
  if (!options.bin_s.empty()) stats_options.bin_s = ParseBinSeconds(options.bin_s);
  TraceReadOptions read;
  read.limit = options.stats.limit;
  read.block_tokens = options.stats.block_tokens;
  const MooncakeTrace trace = ReadMooncakeTrace(options.trace_path, read);
  const TraceStats stats = ComputeTraceStats(trace, options.trace_path, stats_options);
  if (options.json) {
    out << TraceStatsToJson(stats).dump(2) << '\n';
  } else {
    PrintTraceStats(out, stats);
  }
  return 0;
}

}  // namespace feather
