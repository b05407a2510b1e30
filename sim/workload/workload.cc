// workload.cc: synthetic workload generation and Mooncake trace replay (see the header).
//
// Every random quantity has its own Rng stream derived from the seed (arrivals, prompt lengths,
// output lengths, structure picks, unique tokens), so changing one part of a spec (say the rate)
// leaves the others bit-identical, which keeps sweeps paired. Shared segments (a group's prefix,
// a radix node) draw their tokens from a seed of their own, so their content does not depend on
// which requests happened to come first; each is stored once (prompt_store.h).
#include "sim/workload/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/flat_hash_map.h"
#include "policies/selector.h"
#include "base/rng.h"
#include "sim/workload/trace_reader.h"

namespace feather {
namespace {

// Stream salts: arbitrary odd constants, fixed forever (changing one changes every workload).
constexpr uint64_t kArrivalSalt = 0x243f6a8885a308d3ULL;
constexpr uint64_t kPromptLengthSalt = 0x13198a2e03707345ULL;
constexpr uint64_t kOutputLengthSalt = 0xa4093822299f31d1ULL;
constexpr uint64_t kPickSalt = 0x082efa98ec4e6c89ULL;
constexpr uint64_t kUniqueSalt = 0x452821e638d01377ULL;
constexpr uint64_t kSegmentSalt = 0xbe5466cf34e90c6dULL;
constexpr uint64_t kTraceBlockSalt = 0xc0ac29b7c97c50ddULL;

constexpr uint64_t kNoOffset = std::numeric_limits<uint64_t>::max();
constexpr double kMaxArrivalNs = 9.0e18;  // just under INT64_MAX (~285 years)

[[nodiscard]] Rng StreamRng(uint64_t seed, uint64_t salt) { return Rng(MixBits(seed ^ salt)); }

// Random token ids in [1, 2^31): collisions between independent segments are negligible
// (probability ~ n^2 / 2^32 for n segments compared at one position), so sharing happens only
// where the spec says so.
void FillRandomTokens(Rng& rng, Token* out, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<Token>(1 + rng.Uniform(0x7ffffffeULL));
}

// Shared segment `key` (count tokens) from its own seed: its content depends on the seed and the
// key alone, never on which requests came first.
void FillSegment(Token* out, uint64_t count, uint64_t seed, uint64_t key) {
  Rng rng(MixBits(seed ^ kSegmentSalt) ^ MixBits(key + 1));
  FillRandomTokens(rng, out, count);
}

std::string Num(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

[[noreturn]] void Invalid(const std::string& message) {
  throw std::invalid_argument("workload: " + message);
}

// Standard normal by Marsaglia's polar method: only +, *, log and sqrt, so (unlike
// std::normal_distribution) the sequence is fixed by the Rng, not by the standard library.
double StandardNormal(Rng& rng) {
  while (true) {
    const double u = 2.0 * rng.NextDouble() - 1.0;
    const double v = 2.0 * rng.NextDouble() - 1.0;
    const double s = u * u + v * v;
    if (s > 0.0 && s < 1.0) return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

// Exponential with mean 1. 1 - NextDouble() is exact and lies in (0, 1].
double StandardExponential(Rng& rng) { return -std::log(1.0 - rng.NextDouble()); }

void ValidateLength(const LengthSpec& s, const std::string& name) {
  switch (s.kind) {
    case LengthKind::kFixed:
      if (s.value < 1) Invalid(name + ".value must be >= 1 (got 0)");
      return;
    case LengthKind::kUniform:
    case LengthKind::kLognormal:
      if (s.min < 1) Invalid(name + ".min must be >= 1 (got 0)");
      if (s.min > s.max) {
        Invalid(name + ".min (" + std::to_string(s.min) + ") must be <= max (" +
                std::to_string(s.max) + ")");
      }
      if (s.kind == LengthKind::kLognormal) {
        if (!(s.mean > 0) || !std::isfinite(s.mean)) {
          Invalid(name + ".mean must be a finite number > 0 (got " + Num(s.mean) + ")");
        }
        if (!(s.sigma >= 0) || !std::isfinite(s.sigma)) {
          Invalid(name + ".sigma must be a finite number >= 0 (got " + Num(s.sigma) + ")");
        }
      }
      return;
  }
  Invalid(name + ".kind is not a known length kind");
}

void ValidateRate(double rate_per_s, const std::string& name) {
  if (!(rate_per_s > 0) || !std::isfinite(rate_per_s)) {
    Invalid(name + " must be a finite number > 0 (got " + Num(rate_per_s) + ")");
  }
}

void ValidateSynthetic(const WorkloadSpec& spec) {
  if (spec.requests < 1 || spec.requests >= kNoRequest) {
    Invalid("requests must be in [1, " + std::to_string(kNoRequest - 1) + "] (got " +
            std::to_string(spec.requests) + ")");
  }
  const ArrivalSpec& a = spec.arrival;
  switch (a.kind) {
    case ArrivalKind::kPoisson:
      ValidateRate(a.rate_per_s, "arrival.rate_per_s");
      break;
    case ArrivalKind::kPiecewise:
      if (a.phases.empty()) Invalid("arrival.phases must not be empty for piecewise arrivals");
      for (size_t i = 0; i < a.phases.size(); ++i) {
        const std::string name = "arrival.phases[" + std::to_string(i) + "]";
        ValidateRate(a.phases[i].rate_per_s, name + ".rate_per_s");
        const double d = a.phases[i].duration_s;
        if (!(d >= 0) || !std::isfinite(d)) {
          Invalid(name + ".duration_s must be a finite number >= 0 (got " + Num(d) + ")");
        }
      }
      break;
    case ArrivalKind::kOffline:
      break;
    default:
      Invalid("arrival.kind is not a known arrival kind");
  }

  const SharingSpec& s = spec.sharing;
  switch (s.kind) {
    case SharingKind::kGroups:
      if (s.groups < 1) Invalid("sharing.groups must be >= 1 (got 0)");
      if (s.groups >= kNoPrefixGroup) Invalid("sharing.groups is too large");
      if (s.group_sizes == GroupSizes::kZipf &&
          (!(s.zipf_exponent >= 0) || !std::isfinite(s.zipf_exponent))) {
        Invalid("sharing.zipf_exponent must be a finite number >= 0 (got " + Num(s.zipf_exponent) +
                ")");
      }
      if (s.group_sizes != GroupSizes::kEqual && s.group_sizes != GroupSizes::kZipf &&
          s.group_sizes != GroupSizes::kExact) {
        Invalid("sharing.group_sizes is not a known kind");
      }
      break;
    case SharingKind::kRadix: {
      if (s.levels < 1 || s.levels > 8) {
        Invalid("sharing.levels must be in [1, 8] (got " + std::to_string(s.levels) + ")");
      }
      if (s.branching < 1) Invalid("sharing.branching must be >= 1 (got 0)");
      // group = leaf index, a uint32 below kNoPrefixGroup.
      uint64_t leaves = 1;
      for (uint32_t l = 0; l < s.levels; ++l) {
        leaves *= s.branching;
        if (leaves >= kNoPrefixGroup) {
          Invalid("sharing.branching^levels must be < 2^32 leaves (branching " +
                  std::to_string(s.branching) + ", levels " + std::to_string(s.levels) + ")");
        }
      }
      break;
    }
    case SharingKind::kFractional:
    case SharingKind::kTwoPrefixes:
      if (!(s.shared_fraction >= 0 && s.shared_fraction <= 1)) {
        Invalid("sharing.shared_fraction must be in [0, 1] (got " + Num(s.shared_fraction) + ")");
      }
      break;
    case SharingKind::kNone:
      break;
    default:
      Invalid("sharing.kind is not a known sharing kind");
  }
  ValidateLength(spec.prompt_tokens, "prompt_tokens");
  ValidateLength(spec.output_tokens, "output_tokens");

  // The memory limits (scenario validation reports them first, with the file and line).
  const WorkloadLimits& limits = spec.limits;
  if (spec.requests > limits.max_requests) {
    Invalid("requests (" + std::to_string(spec.requests) + ") exceed limits.max_requests (" +
            std::to_string(limits.max_requests) + ")");
  }
  const WorkloadSize size = EstimateWorkloadSize(spec);
  if (size.max_prompt_tokens > limits.max_prompt_tokens) {
    Invalid("prompts of up to " + std::to_string(size.max_prompt_tokens) +
            " tokens exceed limits.max_prompt_tokens (" + std::to_string(limits.max_prompt_tokens) +
            ")");
  }
  if (size.expected_total_tokens > static_cast<double>(limits.max_total_tokens)) {
    Invalid("about " + Num(size.expected_total_tokens) +
            " prompt tokens exceed limits.max_total_tokens (" +
            std::to_string(limits.max_total_tokens) + ")");
  }
}

// Draws token counts from a LengthSpec (validated).
class LengthSampler {
 public:
  explicit LengthSampler(const LengthSpec& spec) : spec_(spec) {
    // E[exp(N(mu, sigma^2))] = exp(mu + sigma^2 / 2), so this mu makes the mean spec.mean.
    if (spec.kind == LengthKind::kLognormal)
      mu_ = std::log(spec.mean) - 0.5 * spec.sigma * spec.sigma;
  }

  [[nodiscard]] uint32_t Draw(Rng& rng) const {
    switch (spec_.kind) {
      case LengthKind::kFixed:
        return spec_.value;
      case LengthKind::kUniform:
        return static_cast<uint32_t>(rng.UniformInt(spec_.min, spec_.max));
      case LengthKind::kLognormal: {
        const double x = std::round(std::exp(mu_ + spec_.sigma * StandardNormal(rng)));
        // Clamp as a double first: x may be huge or +inf.
        return static_cast<uint32_t>(
            std::clamp(x, static_cast<double>(spec_.min), static_cast<double>(spec_.max)));
      }
    }
    return spec_.value;
  }

 private:
  LengthSpec spec_;
  double mu_ = 0;
};

int64_t SecondsToNs(double t_s) {
  const double t_ns = t_s * 1e9;
  if (!(t_ns < kMaxArrivalNs)) {
    Invalid("arrival times overflow 64-bit nanoseconds (rate too low for this many requests)");
  }
  return std::llround(t_ns);
}

// Arrival times of `n` requests. Piecewise: exact piecewise Poisson process; a gap that crosses
// a phase boundary is discarded and redrawn at the new rate from the boundary, which is exact
// because the exponential is memoryless. The last phase lasts forever.
std::vector<int64_t> MakeArrivals(const ArrivalSpec& spec, uint64_t n, Rng& rng) {
  std::vector<int64_t> arrival_ns(n, 0);
  if (spec.kind == ArrivalKind::kOffline) return arrival_ns;
  const bool piecewise = spec.kind == ArrivalKind::kPiecewise;
  const size_t phases = piecewise ? spec.phases.size() : 1;
  const auto rate_of = [&](size_t p) {
    return piecewise ? spec.phases[p].rate_per_s : spec.rate_per_s;
  };
  const auto end_of = [&](size_t p, double start_s) {
    return p + 1 < phases ? start_s + spec.phases[p].duration_s
                          : std::numeric_limits<double>::infinity();
  };
  size_t phase = 0;
  double phase_end_s = end_of(0, 0.0);
  double t_s = 0;
  for (uint64_t i = 0; i < n; ++i) {
    while (true) {
      const double next_s = t_s + StandardExponential(rng) / rate_of(phase);
      if (next_s <= phase_end_s) {
        t_s = next_s;
        break;
      }
      t_s = phase_end_s;
      ++phase;
      phase_end_s = end_of(phase, phase_end_s);
    }
    arrival_ns[i] = SecondsToNs(t_s);
  }
  return arrival_ns;
}

// Everything random about the prompts, drawn before any token is written so that the arena can
// be reserved exactly: per request its group (leaf) and its unique-token count.
struct PromptPlan {
  std::vector<uint32_t> group;
  std::vector<uint32_t> length_tokens;  // unique suffix, or the whole prompt (kFractional, kNone)
  uint64_t total_tokens = 0;
};

PromptPlan PlanPrompts(const WorkloadSpec& spec, uint64_t seed) {
  const SharingSpec& s = spec.sharing;
  const uint64_t n = spec.requests;
  PromptPlan plan;
  plan.group.resize(n);
  plan.length_tokens.resize(n);
  Rng pick = StreamRng(seed, kPickSalt);
  Rng length_rng = StreamRng(seed, kPromptLengthSalt);
  const LengthSampler lengths(spec.prompt_tokens);

  std::vector<double> zipf_cdf;
  if (s.kind == SharingKind::kGroups && s.group_sizes == GroupSizes::kZipf) {
    zipf_cdf.resize(s.groups);
    double sum = 0;
    for (uint32_t g = 0; g < s.groups; ++g) {
      sum += 1.0 / std::pow(static_cast<double>(g) + 1.0, s.zipf_exponent);
      zipf_cdf[g] = sum;
    }
  }
  // kExact: request i of a shuffled round-robin (Fisher-Yates on the same pick stream).
  std::vector<uint32_t> exact_group;
  if (s.kind == SharingKind::kGroups && s.group_sizes == GroupSizes::kExact) {
    exact_group.resize(n);
    for (uint64_t i = 0; i < n; ++i) exact_group[i] = static_cast<uint32_t>(i % s.groups);
    for (uint64_t i = n; i > 1; --i) std::swap(exact_group[i - 1], exact_group[pick.Uniform(i)]);
  }
  uint64_t shared_tokens = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t len = lengths.Draw(length_rng);
    plan.length_tokens[i] = len;
    uint32_t group = 0;
    switch (s.kind) {
      case SharingKind::kGroups:
        if (!exact_group.empty()) {
          group = exact_group[i];
        } else if (zipf_cdf.empty()) {
          group = static_cast<uint32_t>(pick.Uniform(s.groups));
        } else {
          const double u = pick.NextDouble() * zipf_cdf.back();
          const auto it = std::upper_bound(zipf_cdf.begin(), zipf_cdf.end(), u);
          group = static_cast<uint32_t>(
              std::min<size_t>(static_cast<size_t>(it - zipf_cdf.begin()), s.groups - 1));
        }
        shared_tokens += s.prefix_tokens;
        break;
      case SharingKind::kRadix: {
        uint64_t leaf = 0;
        for (uint32_t l = 0; l < s.levels; ++l)
          leaf = leaf * s.branching + pick.Uniform(s.branching);
        group = static_cast<uint32_t>(leaf);
        shared_tokens += uint64_t{s.levels} * s.level_tokens;
        break;
      }
      case SharingKind::kTwoPrefixes:
        group = pick.NextDouble() < s.shared_fraction ? 0 : 1;
        shared_tokens += s.prefix_tokens;
        break;
      case SharingKind::kFractional:
        break;
      case SharingKind::kNone:
        group = kNoPrefixGroup;
        break;
    }
    plan.group[i] = group;
  }
  uint64_t unique_tokens = 0;
  for (const uint32_t len : plan.length_tokens) unique_tokens += len;
  plan.total_tokens = shared_tokens + unique_tokens;
  return plan;
}

// Writes the prompts into the store: each distinct shared head once (a group's prefix, a radix
// leaf's path, the fractional common segment), then each request's own tokens in request order
// (the unique-token stream is drawn in the same order as when every prompt was stored whole).
PromptStore BuildPrompts(const WorkloadSpec& spec, uint64_t seed) {
  const SharingSpec& s = spec.sharing;
  const PromptPlan plan = PlanPrompts(spec, seed);
  const uint64_t n = spec.requests;
  PromptStore set;
  // Reserve exactly what will be stored: every request's own tokens and each distinct head once.
  uint64_t stored_tokens = 0;
  for (const uint32_t len : plan.length_tokens) stored_tokens += len;
  if (s.kind == SharingKind::kGroups || s.kind == SharingKind::kTwoPrefixes ||
      s.kind == SharingKind::kRadix) {
    FlatHashMap<uint32_t, uint8_t> heads;
    for (const uint32_t g : plan.group) heads.Insert(g, 0);
    const uint64_t head_tokens = s.kind == SharingKind::kRadix ? uint64_t{s.levels} * s.level_tokens
                                                               : uint64_t{s.prefix_tokens};
    stored_tokens += heads.size() * head_tokens;
  }  // kFractional: its common segment is inside the lengths' sum (the longest shared part)
  set.Reserve(n, stored_tokens);
  Rng unique_rng = StreamRng(seed, kUniqueSalt);

  // Where each distinct head is stored: dense for groups and the two prefixes, a flat hash map
  // of radix leaves (a tree of 8 levels has far more leaves than any run visits).
  std::vector<uint64_t> group_offset(s.kind == SharingKind::kGroups ? s.groups : 2, kNoOffset);
  FlatHashMap<uint64_t, uint64_t> leaf_offset;
  std::vector<uint64_t> level_size;  // branching^(levels - 1 - l): leaf / it = node at level l
  if (s.kind == SharingKind::kRadix) {
    level_size.assign(s.levels, 1);
    for (uint32_t l = s.levels - 1; l > 0; --l) level_size[l - 1] = level_size[l] * s.branching;
  }
  // kFractional: one common segment, as long as the longest shared part; each prompt's head is
  // its first round(f * len) tokens.
  uint64_t common_offset = 0;
  if (s.kind == SharingKind::kFractional) {
    uint64_t longest = 0;
    for (const uint32_t len : plan.length_tokens) {
      longest =
          std::max<uint64_t>(longest, static_cast<uint64_t>(std::llround(s.shared_fraction * len)));
    }
    common_offset = set.AppendTokens(longest);
    Rng rng(MixBits(seed ^ kSegmentSalt));
    FillRandomTokens(rng, set.MutableTokens(common_offset), longest);
  }

  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t len = plan.length_tokens[i];
    uint64_t unique_tokens = len;
    PromptStore::Piece head;
    switch (s.kind) {
      case SharingKind::kGroups:
      case SharingKind::kTwoPrefixes: {
        const uint32_t g = plan.group[i];
        if (group_offset[g] == kNoOffset) {
          group_offset[g] = set.AppendTokens(s.prefix_tokens);
          FillSegment(set.MutableTokens(group_offset[g]), s.prefix_tokens, seed, g);
        }
        head = {group_offset[g], s.prefix_tokens};
        break;
      }
      case SharingKind::kRadix: {
        const uint64_t leaf = plan.group[i];
        const uint64_t path_tokens = uint64_t{s.levels} * s.level_tokens;
        uint64_t& offset = *leaf_offset.Insert(leaf, kNoOffset).first;
        if (offset == kNoOffset) {
          const uint64_t at = set.AppendTokens(path_tokens);
          for (uint32_t l = 0; l < s.levels; ++l) {
            // Node ids are unique per level; the level goes in the top byte.
            const uint64_t key = (uint64_t{l} << 56) | (leaf / level_size[l]);
            FillSegment(set.MutableTokens(at + uint64_t{l} * s.level_tokens), s.level_tokens, seed,
                        key);
          }
          offset = at;
        }
        head = {offset, static_cast<uint32_t>(path_tokens)};
        break;
      }
      case SharingKind::kFractional: {
        const auto shared = static_cast<uint64_t>(std::llround(s.shared_fraction * len));
        head = {common_offset, static_cast<uint32_t>(shared)};
        unique_tokens = len - shared;
        break;
      }
      case SharingKind::kNone:
        break;
    }
    const uint64_t tail = set.AppendTokens(unique_tokens);
    FillRandomTokens(unique_rng, set.MutableTokens(tail), unique_tokens);
    set.AddPrompt(head, {tail, static_cast<uint32_t>(unique_tokens)}, plan.group[i]);
  }
  return set;
}

Workload GenerateSynthetic(const WorkloadSpec& spec, uint64_t seed) {
  ValidateSynthetic(spec);
  Workload w;
  Rng arrival_rng = StreamRng(seed, kArrivalSalt);
  w.arrival_ns = MakeArrivals(spec.arrival, spec.requests, arrival_rng);
  Rng output_rng = StreamRng(seed, kOutputLengthSalt);
  const LengthSampler outputs(spec.output_tokens);
  w.output_tokens.resize(spec.requests);
  for (uint32_t& out : w.output_tokens) out = outputs.Draw(output_rng);
  w.prompts = BuildPrompts(spec, seed);
  return w;
}

// Trace replay. Block id h always becomes the same block_tokens tokens (from a seed derived from
// h alone), so equal ids give equal tokens and the trace's chained-prefix sharing carries over
// token for token; a record's last block is cut to its input_length.
Workload GenerateFromTrace(const TraceSpec& spec, const WorkloadLimits& limits) {
  if (spec.path.empty()) Invalid("trace.path must not be empty");
  if (!(spec.time_scale >= 0) || !std::isfinite(spec.time_scale)) {
    Invalid("trace.time_scale must be a finite number >= 0 (got " + Num(spec.time_scale) + ")");
  }
  if (spec.block_tokens < 1) Invalid("trace.block_tokens must be >= 1 (got 0)");
  TraceReadOptions options;
  options.limit = spec.limit;
  options.block_tokens = spec.block_tokens;
  options.max_records = limits.max_requests;
  options.max_input_tokens = limits.max_prompt_tokens;
  options.max_total_tokens = limits.max_total_tokens;
  // arrival_ns = timestamp_ms * 1e6 * time_scale must stay below kMaxArrivalNs: the reader
  // refuses a larger timestamp at its line.
  if (spec.time_scale > 1.0) {
    options.max_timestamp_ms =
        std::max<int64_t>(1, static_cast<int64_t>(kMaxArrivalNs / (1e6 * spec.time_scale)) - 1);
  }
  const MooncakeTrace trace = ReadMooncakeTrace(spec.path, options);
  const size_t n = trace.size();
  if (n >= kNoRequest) Invalid("trace has too many records");

  Workload w;
  w.arrival_ns.resize(n);
  w.output_tokens.resize(n);
  PromptStore& set = w.prompts;
  set.Reserve(n, trace.total_input_tokens);  // an upper bound: untouched capacity costs no RSS
  FlatHashMap<uint64_t, uint32_t> group_of_block;  // grouping block id -> dense group id
  // Where each full block is stored (its first full appearance). A record's head is the longest
  // run of its leading blocks stored back to back; the rest is written after it as the record's
  // tail (blocks stored elsewhere copied, new ones generated), and a new full block's first
  // place is where it lands there, so the next record of the conversation finds it.
  FlatHashMap<uint64_t, uint64_t> block_offset;
  const uint64_t bt = spec.block_tokens;
  // Closed loop: the latest request holding each leading run of >= kMinTurnBlocks block ids,
  // keyed by a hash chained over the run's ids (64 bits: a collision among a trace's runs is
  // as unlikely as the block-hash collisions the selectors already ignore).
  FlatHashMap<uint64_t, RequestId> latest_with_run;
  std::vector<uint64_t> run_keys;
  if (spec.closed_loop) w.predecessor.assign(n, kNoRequest);

  for (size_t i = 0; i < n; ++i) {
    const TraceRecord& r = trace.records[i];
    const double t_ns = static_cast<double>(r.timestamp_ms) * 1e6 * spec.time_scale;
    if (!(t_ns <= kMaxArrivalNs)) Invalid("trace arrival times overflow 64-bit nanoseconds");
    w.arrival_ns[i] = std::llround(t_ns);
    w.output_tokens[i] = r.output_tokens;

    const std::span<const uint64_t> blocks = trace.Blocks(i);
    if (spec.closed_loop) {
      run_keys.resize(blocks.size());
      uint64_t key = kTraceBlockSalt;
      for (size_t k = 0; k < blocks.size(); ++k) run_keys[k] = key = MixBits(key ^ blocks[k]) + k;
      for (size_t len = blocks.size(); len >= kMinTurnBlocks; --len) {  // the longest run first
        if (const RequestId* j = latest_with_run.Find(run_keys[len - 1])) {
          w.predecessor[i] = *j;
          break;
        }
      }
      for (size_t len = kMinTurnBlocks; len <= blocks.size(); ++len) {
        *latest_with_run.Insert(run_keys[len - 1], static_cast<RequestId>(i)).first =
            static_cast<RequestId>(i);
      }
    }
    // Tokens of block k: a full block_tokens but the last, which is cut to input_length.
    const auto count_of = [&](size_t k) {
      return std::min<uint64_t>(bt, r.input_tokens - std::min<uint64_t>(r.input_tokens, k * bt));
    };
    size_t run = 0;  // leading blocks stored back to back, full
    uint64_t head_offset = 0;
    while (run < blocks.size() && count_of(run) == bt) {
      const uint64_t* at = block_offset.Find(blocks[run]);
      if (at == nullptr || (run > 0 && *at != head_offset + run * bt)) break;
      if (run == 0) head_offset = *at;
      ++run;
    }
    uint64_t tail_tokens = 0;
    for (size_t k = run; k < blocks.size(); ++k) tail_tokens += count_of(k);
    const uint64_t tail_offset = set.AppendTokens(tail_tokens);
    uint64_t written = 0;
    for (size_t k = run; k < blocks.size(); ++k) {
      const uint64_t count = count_of(k);
      const uint64_t here = tail_offset + written;
      const uint64_t* stored = count == bt ? block_offset.Find(blocks[k]) : nullptr;
      if (stored != nullptr) {
        const Token* from = set.Tokens(*stored);
        std::copy(from, from + count, set.MutableTokens(here));
      } else {
        Rng rng(MixBits(blocks[k] ^ kTraceBlockSalt));
        FillRandomTokens(rng, set.MutableTokens(here), count);
        if (count == bt) block_offset.Insert(blocks[k], here);
      }
      written += count;
    }
    PromptStore::Piece head{head_offset, static_cast<uint32_t>(run * bt)};
    PromptStore::Piece tail{tail_offset, static_cast<uint32_t>(tail_tokens)};
    if (run > 0 && head.offset + head.tokens == tail.offset) {  // one run: the head grows
      head.tokens += tail.tokens;
      tail = {tail.offset + tail.tokens, 0};
    }

    // Oracle group: the request's second block (its first when it has one). See the header.
    const uint64_t key = blocks.size() >= 2 ? blocks[1] : blocks[0];
    set.AddPrompt(head, tail,
                  *group_of_block.Insert(key, static_cast<uint32_t>(group_of_block.size())).first);
  }
  return w;
}

}  // namespace

WorkloadSize EstimateWorkloadSize(const WorkloadSpec& spec) {
  const LengthSpec& l = spec.prompt_tokens;
  uint64_t length_max = l.value;
  double length_mean = l.value;
  switch (l.kind) {
    case LengthKind::kFixed:
      break;
    case LengthKind::kUniform:
      length_max = l.max;
      length_mean = (static_cast<double>(l.min) + static_cast<double>(l.max)) / 2;
      break;
    case LengthKind::kLognormal:  // the clamped draw's mean is near the clamped mean
      length_max = l.max;
      length_mean = std::clamp(l.mean, static_cast<double>(l.min), static_cast<double>(l.max));
      break;
  }
  const SharingSpec& s = spec.sharing;
  uint64_t shared = 0;
  switch (s.kind) {
    case SharingKind::kGroups:
    case SharingKind::kTwoPrefixes:
      shared = s.prefix_tokens;
      break;
    case SharingKind::kRadix:
      shared = uint64_t{s.levels} * s.level_tokens;
      break;
    case SharingKind::kFractional:  // the shared part is inside the length
    case SharingKind::kNone:
      break;
  }
  WorkloadSize size;
  size.max_prompt_tokens = shared + length_max;
  size.expected_total_tokens =
      static_cast<double>(spec.requests) * (static_cast<double>(shared) + length_mean);
  return size;
}

Workload GenerateWorkload(const WorkloadSpec& spec, uint64_t seed) {
  return spec.use_trace ? GenerateFromTrace(spec.trace, spec.limits)
                        : GenerateSynthetic(spec, seed);
}

}  // namespace feather
