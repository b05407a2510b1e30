// paper_experiments.cc: the decode batches of the paper's §3 experiments and their measurement
// (see paper_experiments.h).
#include "calib/paper_experiments.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace feather::calib {
namespace {


// A decode batch assembled from shared segments (runs of whole blocks held by several requests)
// and private suffixes, with physical ids drawn from a shuffled pool, as a paged KV cache hands
// them out.
class BatchBuilder {
 public:
  explicit BatchBuilder(uint64_t seed) : rng_(seed) {}

  // A shared run of `tokens` (a multiple of the block size); returns its index.
  size_t AddSegment(uint32_t tokens) {
    segments_.push_back(Allocate(tokens / kExperimentBlockTokens));
    return segments_.size() - 1;
  }

  // A decode request reading `segments` in order, then `private_tokens` of its own.
  void AddRequest(const std::vector<size_t>& segments, uint32_t private_tokens) {
    std::vector<uint32_t> table;
    uint32_t context = 0;
    for (const size_t s : segments) {
      table.insert(table.end(), segments_[s].begin(), segments_[s].end());
      context += static_cast<uint32_t>(segments_[s].size()) * kExperimentBlockTokens;
    }
    context += private_tokens;
    const uint32_t blocks = (context + 1 + kExperimentBlockTokens - 1) / kExperimentBlockTokens;  // + the new token
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
    batch.plan.block_tokens = kExperimentBlockTokens;
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

}  // namespace

std::vector<ExperimentPoint> PaperExperiments(bool quick, uint64_t pool) {
  std::vector<ExperimentPoint> points;
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
    const uint32_t segment = 2048 / levels / kExperimentBlockTokens * kExperimentBlockTokens;
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

std::vector<StepMeasurement> MeasureExperiments(std::span<const ExperimentPoint> points,
                                                Engine* const engines[2], uint32_t parallel_units,
                                                const ModelConfig& model, int repetitions) {
  std::vector<MeasuredEngine> measured_engines;
  for (int cascade = 0; cascade < 2; ++cascade) {
    measured_engines.push_back({engines[cascade], cascade == 1, parallel_units});
  }
  std::vector<HarnessStep> steps;
  for (const ExperimentPoint& point : points) {
    steps.push_back({&point.batch.plan, 0});
    steps.push_back({&point.batch.plan, 1});
  }
  HarnessOptions options;
  options.repetitions = repetitions;
  options.perf_counters = true;
  options.after_pass = [&](int pass) {
    std::fprintf(stderr, "\r  pass %d/%d over %zu steps%s ", pass, repetitions, steps.size(),
                 pass == 0 ? " (warm-up)" : "");
  };
  return MeasureSteps(measured_engines, steps, model, options);
}

}  // namespace feather::calib
