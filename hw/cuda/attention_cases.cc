// attention_cases.cc: random paged-attention cases, their references and plans (see
// attention_cases.h).
#include "hw/cuda/attention_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "base/rng.h"
#include "hw/attention_reference.h"
#include "hw/cuda/attention_emulation.h"
#include "hw/cuda/half.h"

namespace feather::hw::cuda {
namespace {

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

const char* FormName(AttentionForm form) {
  switch (form) {
    case AttentionForm::kDecode:
      return "decode";
    case AttentionForm::kPrefill:
      return "prefill";
    case AttentionForm::kCascade:
      return "cascade";
  }
  return "?";
}

std::string Join(const std::vector<uint32_t>& values) {
  std::ostringstream text;
  for (size_t i = 0; i < values.size(); ++i) text << (i ? "," : "") << values[i];
  return text.str();
}

void Validate(const AttentionCaseShape& s) {
  auto bad = [&](const std::string& what) {
    throw std::invalid_argument("attention case '" + s.Name() + "': " + what);
  };
  if (s.seq_lens.empty()) bad("no requests");
  if (s.kv_heads == 0 || s.num_heads % s.kv_heads != 0) bad("heads not a multiple of kv heads");
  if (s.page_size == 0) bad("page size 0");
  if (s.form == AttentionForm::kPrefill) {
    if (s.new_tokens.size() != s.seq_lens.size()) bad("new_tokens must have one entry per request");
    for (size_t r = 0; r < s.seq_lens.size(); ++r) {
      if (s.new_tokens[r] == 0 || s.new_tokens[r] > s.seq_lens[r])
        bad("chunk outside [1, seq_len]");
    }
  }
  if (s.form == AttentionForm::kCascade) {
    if (s.prefix_tokens == 0 || s.prefix_tokens % s.page_size != 0) {
      bad("prefix_tokens must be a positive multiple of the page size");
    }
    if (s.groups == 0 || s.groups > s.seq_lens.size()) bad("groups outside [1, requests]");
    for (const uint32_t len : s.seq_lens) {
      if (len < s.prefix_tokens) bad("a request shorter than the shared prefix");
    }
  }
}

}  // namespace

std::string AttentionCaseShape::Name() const {
  std::ostringstream name;
  name << FormName(form) << ' ' << KvElementName(dtype) << " d" << head_dim << " h" << num_heads
       << '/' << kv_heads << " lens " << Join(seq_lens);
  if (form == AttentionForm::kPrefill) name << " new " << Join(new_tokens);
  if (form == AttentionForm::kCascade) name << " prefix " << prefix_tokens << " groups " << groups;
  name << (split_kv ? " split" : " nosplit");
  return name.str();
}

AttentionCase MakeAttentionCase(const AttentionCaseShape& shape) {
  Validate(shape);
  AttentionCase c;
  c.shape = shape;
  const uint32_t ps = shape.page_size;
  const auto batch = static_cast<uint32_t>(shape.seq_lens.size());
  const bool cascade = shape.form == AttentionForm::kCascade;
  const uint32_t prefix_pages = cascade ? shape.prefix_tokens / ps : 0;
  auto group_of = [&](uint32_t r) { return cascade ? r * shape.groups / batch : 0; };

  uint32_t total_pages = cascade ? shape.groups * prefix_pages : 0;
  for (const uint32_t len : shape.seq_lens) {
    total_pages += CeilDiv(len - (cascade ? shape.prefix_tokens : 0), ps);
  }
  const uint32_t num_blocks = total_pages + 3;  // a few pages nobody uses
  Rng rng(shape.seed);
  std::vector<uint32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0u);
  for (uint32_t i = num_blocks - 1; i > 0; --i) {
    std::swap(physical[i], physical[rng.Uniform(uint64_t{i} + 1)]);
  }
  uint32_t next_page = 0;

  // Prefix pages per group, then every request's table.
  std::vector<std::vector<uint32_t>> group_pages(cascade ? shape.groups : 0);
  for (auto& pages : group_pages) {
    for (uint32_t p = 0; p < prefix_pages; ++p) pages.push_back(physical[next_page++]);
  }
  c.kv_indptr.assign(1, 0);
  for (uint32_t r = 0; r < batch; ++r) {
    const uint32_t len = shape.seq_lens[r];
    if (cascade) {
      const auto& shared = group_pages[group_of(r)];
      c.kv_indices.insert(c.kv_indices.end(), shared.begin(), shared.end());
    }
    const uint32_t own = CeilDiv(len - (cascade ? shape.prefix_tokens : 0), ps);
    for (uint32_t p = 0; p < own; ++p) c.kv_indices.push_back(physical[next_page++]);
    c.kv_indptr.push_back(static_cast<uint32_t>(c.kv_indices.size()));
    c.kv_last_page_len.push_back(LastPageLen(len, ps));
  }
  if (cascade) {
    c.prefix_indptr.assign(1, 0);
    c.group_indptr.assign(1, 0);
    for (uint32_t g = 0; g < shape.groups; ++g) {
      c.prefix_indices.insert(c.prefix_indices.end(), group_pages[g].begin(), group_pages[g].end());
      c.prefix_indptr.push_back(static_cast<uint32_t>(c.prefix_indices.size()));
      c.prefix_last_page_len.push_back(ps);
      for (uint32_t r = 0; r < batch; ++r) {
        if (group_of(r) == g) c.group_rows.push_back(r);
      }
      c.group_indptr.push_back(static_cast<uint32_t>(c.group_rows.size()));
    }
    c.suffix_begin.assign(batch, shape.prefix_tokens);
  }

  // The pool, in the kernel's dtype and in the reference's.
  c.ref_layout =
      PagedKvLayout{.num_blocks = num_blocks,
                    .kv_heads = shape.kv_heads,
                    .block_tokens = ps,
                    .head_dim = shape.head_dim,
                    .dtype = shape.dtype == KvElement::kBf16 ? KvDtype::kBf16 : KvDtype::kFp32};
  const size_t elems = c.ref_layout.BlockElems() * num_blocks;
  c.k_ref.resize(c.ref_layout.PoolBytes());
  c.v_ref.resize(c.ref_layout.PoolBytes());
  c.k_kernel.resize(elems * KvElementBytes(shape.dtype));
  c.v_kernel.resize(elems * KvElementBytes(shape.dtype));
  for (auto [ref, kernel] : {std::pair{&c.k_ref, &c.k_kernel}, std::pair{&c.v_ref, &c.v_kernel}}) {
    for (size_t i = 0; i < elems; ++i) {
      const auto value = static_cast<float>(2 * rng.NextDouble() - 1);
      switch (shape.dtype) {
        case KvElement::kFp32:
          std::memcpy(ref->data() + 4 * i, &value, 4);
          std::memcpy(kernel->data() + 4 * i, &value, 4);
          break;
        case KvElement::kBf16: {
          const uint16_t bits = FloatToBf16(value);
          std::memcpy(ref->data() + 2 * i, &bits, 2);
          std::memcpy(kernel->data() + 2 * i, &bits, 2);
          break;
        }
        case KvElement::kFp16: {
          const uint16_t bits = FloatToHalf(value);
          const float widened = HalfToFloat(bits);
          std::memcpy(ref->data() + 4 * i, &widened, 4);
          std::memcpy(kernel->data() + 2 * i, &bits, 2);
          break;
        }
      }
    }
  }

  // Queries and the expected answer.
  if (shape.form == AttentionForm::kPrefill) {
    c.qo_indptr.assign(1, 0);
    for (const uint32_t n : shape.new_tokens) c.qo_indptr.push_back(c.qo_indptr.back() + n);
    c.num_rows = c.qo_indptr.back();
  } else {
    c.num_rows = batch;
  }
  const size_t q_elems = size_t{c.num_rows} * shape.num_heads * shape.head_dim;
  c.q.resize(q_elems);
  for (float& value : c.q) value = static_cast<float>(2 * rng.NextDouble() - 1);
  c.expected_out.assign(q_elems, 0.0F);
  PagedKvView kv{.k_data = c.k_ref.data(),
                 .v_data = c.v_ref.data(),
                 .layout = c.ref_layout,
                 .batch_size = batch,
                 .indptr = c.kv_indptr.data(),
                 .indices = c.kv_indices.data(),
                 .last_page_len = c.kv_last_page_len.data()};
  const float scale = 1.0F / std::sqrt(static_cast<float>(shape.head_dim));
  if (shape.form == AttentionForm::kPrefill) {
    PrefillAttentionParams p{.q = c.q.data(),
                             .out = c.expected_out.data(),
                             .kv = kv,
                             .qo_indptr = c.qo_indptr.data(),
                             .num_heads = shape.num_heads,
                             .scale = scale,
                             .num_threads = 1};
    ReferencePrefillAttention(p);
  } else {
    c.expected_lse.assign(size_t{c.num_rows} * shape.num_heads, 0.0F);
    DecodeAttentionParams p{.q = c.q.data(),
                            .out = c.expected_out.data(),
                            .lse = c.expected_lse.data(),
                            .kv = kv,
                            .kv_begin = nullptr,
                            .num_heads = shape.num_heads,
                            .scale = scale,
                            .num_threads = 1};
    ReferenceDecodeAttention(p);
  }
  return c;
}

std::vector<AttentionPlan> PlanAttentionCase(const AttentionCase& c) {
  const AttentionCaseShape& s = c.shape;
  AttentionPlanInput in;
  in.num_entries = static_cast<uint32_t>(s.seq_lens.size());
  in.kv_indptr = c.kv_indptr.data();
  in.kv_last_page_len = c.kv_last_page_len.data();
  in.page_size = s.page_size;
  in.num_heads = s.num_heads;
  in.kv_heads = s.kv_heads;
  in.head_dim = s.head_dim;
  in.split_kv = s.split_kv;
  in.max_ctas = s.max_ctas;
  std::vector<AttentionPlan> plans;
  auto build = [&](const AttentionPlanInput& input) {
    AttentionPlan plan;
    const std::string why = BuildAttentionPlan(input, plan);
    if (!why.empty()) throw std::invalid_argument("attention case '" + s.Name() + "': " + why);
    plans.push_back(std::move(plan));
  };
  switch (s.form) {
    case AttentionForm::kDecode:
      build(in);
      break;
    case AttentionForm::kPrefill:
      in.qo_indptr = c.qo_indptr.data();
      in.causal = true;
      build(in);
      break;
    case AttentionForm::kCascade: {
      AttentionPlanInput prefix = in;
      prefix.num_entries = s.groups;
      prefix.kv_indptr = c.prefix_indptr.data();
      prefix.kv_last_page_len = c.prefix_last_page_len.data();
      prefix.qo_indptr = c.group_indptr.data();
      prefix.row_list = c.group_rows.data();
      build(prefix);
      AttentionPlanInput suffix = in;
      suffix.kv_begin = c.suffix_begin.data();
      build(suffix);
      break;
    }
  }
  return plans;
}

PagedAttentionArgs CaseArgs(const AttentionCase& c, const AttentionPlan& plan, size_t index,
                            float* out, float* lse, float* partial_out, float* partial_lse) {
  const AttentionCaseShape& s = c.shape;
  const bool prefix_pass = s.form == AttentionForm::kCascade && index == 0;
  PagedAttentionArgs a;
  a.q = c.q.data();
  a.out = out;
  a.lse = lse;
  a.k_pool = c.k_kernel.data();
  a.v_pool = c.v_kernel.data();
  a.dtype = s.dtype;
  a.stride_page = c.StridePage();
  a.stride_head = c.StrideHead();
  a.page_size = s.page_size;
  a.head_dim = s.head_dim;
  a.num_heads = s.num_heads;
  a.kv_heads = s.kv_heads;
  a.kv_indptr = prefix_pass ? c.prefix_indptr.data() : c.kv_indptr.data();
  a.kv_indices = prefix_pass ? c.prefix_indices.data() : c.kv_indices.data();
  a.scale = 1.0F / std::sqrt(static_cast<float>(s.head_dim));
  a.partial_out = partial_out;
  a.partial_lse = partial_lse;
  a.items = plan.items.data();
  a.num_items = static_cast<uint32_t>(plan.items.size());
  a.row_list = plan.row_list.data();
  a.merge_rows = plan.merge_rows.data();
  a.merge_indptr = plan.merge_indptr.data();
  a.merge_slots = plan.merge_slots.data();
  a.num_merge_rows = static_cast<uint32_t>(plan.merge_rows.size());
  return a;
}

CaseOutput EmulateAttentionCase(const AttentionCase& c) {
  const AttentionCaseShape& s = c.shape;
  const std::vector<AttentionPlan> plans = PlanAttentionCase(c);
  const size_t out_elems = size_t{c.num_rows} * s.num_heads * s.head_dim;
  const size_t lse_elems = size_t{c.num_rows} * s.num_heads;
  std::vector<std::vector<float>> outs(plans.size(), std::vector<float>(out_elems, 0.0F));
  std::vector<std::vector<float>> lses(plans.size(), std::vector<float>(lse_elems, 0.0F));
  for (size_t i = 0; i < plans.size(); ++i) {
    std::vector<float> partial_out(size_t{plans[i].num_slots} * s.num_heads * s.head_dim);
    std::vector<float> partial_lse(size_t{plans[i].num_slots} * s.num_heads);
    EmulatePagedAttention(CaseArgs(c, plans[i], i, outs[i].data(), lses[i].data(),
                                   partial_out.data(), partial_lse.data()));
  }
  CaseOutput result;
  if (s.form == AttentionForm::kCascade) {  // suffix (plan 1) ← merge prefix (plan 0)
    EmulateMergeStates(outs[1].data(), lses[1].data(), outs[0].data(), lses[0].data(), c.num_rows,
                       s.num_heads, s.head_dim);
    result.out = std::move(outs[1]);
    result.lse = std::move(lses[1]);
  } else {
    result.out = std::move(outs[0]);
    result.lse = std::move(lses[0]);
  }
  return result;
}

CaseError CompareToExpected(const AttentionCase& c, const CaseOutput& got) {
  CaseError error;
  error.worst_excess = -1;
  auto check = [&](const char* what, const std::vector<float>& want,
                   const std::vector<float>& have) {
    if (have.size() < want.size()) {
      error.worst_excess = 1;
      if (error.first_failure.empty()) error.first_failure = std::string(what) + ": missing values";
      return;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const double w = want[i];
      const double h = have[i];
      if (std::isinf(w) || std::isinf(h)) {
        if (w != h) {
          error.worst_excess = std::max(error.worst_excess, 1.0);
          if (error.first_failure.empty()) {
            error.first_failure = std::string(what) + "[" + std::to_string(i) +
                                  "] = " + std::to_string(h) + ", want " + std::to_string(w);
          }
        }
        continue;
      }
      const double abs_error = std::fabs(h - w);
      const double excess = abs_error - (kCaseAbsTolerance + kCaseRelTolerance * std::fabs(w));
      error.max_abs_error = std::max(error.max_abs_error, abs_error);
      if (excess > 0 && error.first_failure.empty()) {
        error.first_failure = std::string(what) + "[" + std::to_string(i) +
                              "] = " + std::to_string(h) + ", want " + std::to_string(w);
      }
      error.worst_excess = std::max(error.worst_excess, excess);
    }
  };
  check("out", c.expected_out, got.out);
  if (!c.expected_lse.empty()) check("lse", c.expected_lse, got.lse);
  return error;
}

std::vector<AttentionCaseShape> StandardAttentionCases() {
  std::vector<AttentionCaseShape> cases;
  auto add = [&](AttentionForm form, KvElement dtype, uint32_t d, uint32_t heads, uint32_t kv_heads,
                 std::vector<uint32_t> lens, bool split, uint32_t max_ctas) -> AttentionCaseShape& {
    AttentionCaseShape s;
    s.form = form;
    s.dtype = dtype;
    s.head_dim = d;
    s.num_heads = heads;
    s.kv_heads = kv_heads;
    s.seq_lens = std::move(lens);
    s.split_kv = split;
    s.max_ctas = max_ctas;
    s.seed = cases.size() + 1;
    cases.push_back(s);
    return cases.back();
  };
  using F = AttentionForm;
  using E = KvElement;
  add(F::kDecode, E::kBf16, 128, 8, 2, {1, 15, 16, 17, 33, 200}, true, 264);
  add(F::kDecode, E::kFp16, 64, 8, 8, {1, 15, 16, 17, 33, 200}, false, 0);
  add(F::kDecode, E::kFp32, 128, 32, 4, {5, 300}, true, 264);
  add(F::kDecode, E::kBf16, 64, 4, 1, {1000, 3}, true, 8);
  add(F::kDecode, E::kFp16, 128, 16, 1, {40, 17}, true, 264);  // group 16: one row, 16 lanes
  add(F::kPrefill, E::kBf16, 128, 8, 2, {17, 40, 5}, false, 0).new_tokens = {17, 9, 1};
  add(F::kPrefill, E::kFp16, 64, 8, 8, {33, 64}, true, 16).new_tokens = {20, 64};
  add(F::kPrefill, E::kFp32, 128, 16, 2, {50}, true, 264).new_tokens = {7};
  add(F::kPrefill, E::kBf16, 128, 16, 1, {20}, false, 0).new_tokens = {20};
  // One row per item with a group of 2 and with causal positions: the decode kernel's other paths.
  add(F::kDecode, E::kFp32, 64, 8, 4, {7, 64, 129}, true, 264);
  add(F::kPrefill, E::kBf16, 128, 8, 2, {9, 70}, true, 264).new_tokens = {1, 1};
  {
    AttentionCaseShape& s = add(F::kCascade, E::kBf16, 128, 8, 2, {32, 33, 48, 100, 47}, true, 264);
    s.prefix_tokens = 32;
  }
  {
    AttentionCaseShape& s =
        add(F::kCascade, E::kFp16, 64, 8, 8, {16, 20, 64, 17, 16, 90}, false, 0);
    s.prefix_tokens = 16;
    s.groups = 2;
  }
  {
    AttentionCaseShape& s = add(F::kCascade, E::kFp32, 128, 32, 4, {64, 80, 300}, true, 264);
    s.prefix_tokens = 64;
    s.groups = 3;
  }
  return cases;
}

}  // namespace feather::hw::cuda
