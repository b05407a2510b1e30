// prompt_view.h: the one way every layer reads a prompt and its block-hash chain: a sequence
// stored as at most two contiguous pieces, a shared head and a request's own tail.
//
// Why two pieces. A workload's prompts share prefixes: in the default scenario 20,000 prompts
// are 5 group prefixes of 5,000 tokens, each followed by 50-150 tokens of the request's own.
// Storing every prompt contiguously costs the total of all tokens (400 MB at 20K requests, 20 GB
// at 1M); storing each shared prefix once and a request's own tokens apart costs the unique
// tokens (8 MB at 20K). A prompt is then a head (a span into the shared store: a group prefix,
// a radix leaf's path, a trace's run of stored blocks) followed by a tail (the request's own
// tokens). The block-hash chain of a prompt has the same shape: the chain of the head's full
// blocks is the same for every request with that head and is stored once; the chain of the rest
// continues from its last hash and is the request's own (sim/workload/prompt_store.h).
//
// Why not N pieces (a list of segments per prompt). Every hot loop that reads a prompt or a
// chain by index (the KV cache's hit walk, the CHT's hashing, a radix match) pays one
// well-predicted branch on a two-piece view; an N-piece view needs a piece cursor in every loop
// and a piece list per request. Two pieces are enough for every sharing shape the workloads
// generate: the shared part of a prompt is always a prefix, and a prefix made of several shared
// segments (radix levels, trace blocks) is stored once as one run per distinct path.
//
// A view is two std::spans and a key naming its head (40 bytes), cheap to copy and pass by
// value; it borrows the storage.
// A plain contiguous sequence converts implicitly (head = all of it, tail empty), so code and
// tests holding a std::span or a std::vector pass it where a view is expected.
//
// Complexity: size, operator[], head, tail O(1); CopyTo and ForEachPiece O(size);
// ForEachChunkRun O(1) besides its callbacks (at most three calls).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/types.h"

namespace feather {

template <typename T>
class TwoPieceView {
 public:
  TwoPieceView() = default;
  // A contiguous sequence: the head alone.
  TwoPieceView(std::span<const T> whole) : head_(whole) {}  // NOLINT(google-explicit-constructor)
  TwoPieceView(const std::vector<T>& whole)                 // NOLINT(google-explicit-constructor)
      : head_(whole.data(), whole.size()) {}
  // head then tail. An empty head makes the tail the head (so head() is empty only when the
  // whole view is). `head_key`, when not 0, names where the head's contents come from: two
  // views whose heads carry the same key (from the same store) agree on their heads' common
  // length (both are prefixes of one stored run), so a reader may compute what depends on the
  // first n head elements once per (key, n): the CHT hashes a shared prefix once. 0: unknown.
  TwoPieceView(std::span<const T> head, std::span<const T> tail, uint64_t head_key = 0)
      : head_(head.empty() ? tail : head),
        tail_(head.empty() ? std::span<const T>{} : tail),
        head_key_(head.empty() ? 0 : head_key) {}

  [[nodiscard]] size_t size() const { return head_.size() + tail_.size(); }
  [[nodiscard]] bool empty() const { return head_.empty(); }
  [[nodiscard]] const T& operator[](size_t i) const {
    return i < head_.size() ? head_[i] : tail_[i - head_.size()];
  }
  [[nodiscard]] std::span<const T> head() const { return head_; }
  [[nodiscard]] std::span<const T> tail() const { return tail_; }
  [[nodiscard]] uint64_t head_key() const { return head_key_; }
  // Whether the view is one contiguous piece (then head() is all of it).
  [[nodiscard]] bool contiguous() const { return tail_.empty(); }

  // The first n elements (n <= size()). Sub-views carry no head key.
  [[nodiscard]] TwoPieceView first(size_t n) const {
    if (n <= head_.size()) return TwoPieceView(head_.first(n));
    return TwoPieceView(head_, tail_.first(n - head_.size()));
  }
  // Elements [begin, begin + n) (begin + n <= size()) as a view of at most two pieces.
  [[nodiscard]] TwoPieceView subview(size_t begin, size_t n) const {
    const size_t h = head_.size();
    if (begin >= h) return TwoPieceView(tail_.subspan(begin - h, n));
    if (begin + n <= h) return TwoPieceView(head_.subspan(begin, n));
    return TwoPieceView(head_.subspan(begin), tail_.first(begin + n - h));
  }

  // Calls fn(std::span<const T>) for each non-empty piece, in order.
  template <typename Fn>
  void ForEachPiece(Fn&& fn) const {
    if (!head_.empty()) fn(head_);
    if (!tail_.empty()) fn(tail_);
  }
  // Splits chunks [first, last) of `chunk` elements each (the view's last chunk may be shorter;
  // last <= the chunk count) by where they lie, in chunk order: run(std::span<const T> elements,
  // uint32_t chunks) for each run of chunks wholly inside one piece (at most one in the head,
  // one in the tail), seam(TwoPieceView chunk_view) for the one chunk that crosses from head to
  // tail, if the seam falls inside a chunk. A hasher reads the runs at full speed and the seam
  // chunk by a slower path (a copy, a two-piece loop). chunk >= 1.
  template <typename Run, typename Seam>
  void ForEachChunkRun(uint32_t chunk, uint32_t first, uint32_t last, Run&& run,
                       Seam&& seam) const {
    if (first >= last) return;
    const size_t h = head_.size();
    uint32_t c = first;
    const auto head_end =
        static_cast<uint32_t>(std::min<size_t>(last, contiguous() ? last : h / chunk));
    if (c < head_end) {
      const size_t begin = size_t{c} * chunk;
      const size_t end = std::min(size(), size_t{head_end} * chunk);
      run(head_.subspan(begin, end - begin), head_end - c);
      c = head_end;
    }
    if (c < last && size_t{c} * chunk < h) {
      const size_t begin = size_t{c} * chunk;
      seam(subview(begin, std::min<size_t>(chunk, size() - begin)));
      ++c;
    }
    if (c < last) {
      const size_t begin = size_t{c} * chunk - h;
      const size_t end = std::min(size(), size_t{last} * chunk) - h;
      run(tail_.subspan(begin, end - begin), last - c);
    }
  }

  // Writes the elements to out[0, size()).
  T* CopyTo(T* out) const {
    out = std::copy(head_.begin(), head_.end(), out);
    return std::copy(tail_.begin(), tail_.end(), out);
  }
  [[nodiscard]] std::vector<T> ToVector() const {
    std::vector<T> all(size());
    CopyTo(all.data());
    return all;
  }

 private:
  std::span<const T> head_;
  std::span<const T> tail_;
  uint64_t head_key_ = 0;
};

// A prompt's tokens, and a prompt's block-hash chain (hash i covers blocks [0, i]).
using PromptView = TwoPieceView<Token>;
using ChainView = TwoPieceView<PrefixHash>;

}  // namespace feather
