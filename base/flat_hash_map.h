// flat_hash_map.h: an open-addressing hash map for trivially copyable keys and values.
//
// The scheduler's hot tables (chunk hash -> tree node, block hash -> block, token -> child) are
// probed millions of times per second; std::unordered_map's node-per-entry layout costs a cache
// miss per probe and an allocation per insert. This map keeps keys and values in one flat slot
// array with linear probing and backward-shift deletion (no tombstones), so after warm-up
// (capacity reserved or grown once) Insert/Erase/Find never allocate.
//
// Complexity: Find, Insert, Erase are O(1) expected at the fixed maximum load factor of 1/2;
// a growth rehash is O(capacity) and happens only when size exceeds capacity / 2.
// Iteration order is the slot order: callers must never let results depend on it.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace feather {

// Murmur3's 64-bit finalizer: spreads keys that are small integers (trace block ids, token ids)
// over the whole table. Keys that are already xxHash digests pass through it harmlessly.
[[nodiscard]] constexpr uint64_t MixBits(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  key *= 0xc4ceb9fe1a85ec53ULL;
  key ^= key >> 33;
  return key;
}

template <typename Key>
struct FlatHash {
  [[nodiscard]] uint64_t operator()(const Key& key) const {
    static_assert(std::is_integral_v<Key>, "provide a FlatHash specialization for this key");
    return MixBits(static_cast<uint64_t>(key));
  }
};

template <typename Key, typename Value, typename Hash = FlatHash<Key>>
class FlatHashMap {
  static_assert(std::is_trivially_copyable_v<Key> && std::is_trivially_copyable_v<Value>);

 public:
  FlatHashMap() { Rehash(16); }
  explicit FlatHashMap(size_t expected_size) { Reserve(expected_size); }

  // Grows the table so that `expected_size` entries fit without another rehash.
  void Reserve(size_t expected_size) {
    size_t capacity = 16;
    while (capacity < expected_size * 2) capacity *= 2;
    if (capacity > slots_.size()) Rehash(capacity);
  }

  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] bool empty() const { return size_ == 0; }
  [[nodiscard]] size_t capacity() const { return slots_.size(); }
  [[nodiscard]] size_t MemoryBytes() const {
    return slots_.capacity() * sizeof(Slot) + used_.capacity();
  }

  // Returns a pointer to the value stored for `key`, or nullptr. Valid until the next insertion.
  [[nodiscard]] Value* Find(const Key& key) {
    const size_t slot = FindSlot(key);
    return slot == kNotFound ? nullptr : &slots_[slot].value;
  }
  [[nodiscard]] const Value* Find(const Key& key) const {
    const size_t slot = FindSlot(key);
    return slot == kNotFound ? nullptr : &slots_[slot].value;
  }
  [[nodiscard]] bool Contains(const Key& key) const { return FindSlot(key) != kNotFound; }

  // Inserts `key` with `value` if absent. Returns the stored value and whether it was inserted.
  std::pair<Value*, bool> Insert(const Key& key, const Value& value) {
    if ((size_ + 1) * 2 > slots_.size()) Rehash(slots_.size() * 2);
    size_t slot = Home(key);
    while (used_[slot]) {
      if (slots_[slot].key == key) return {&slots_[slot].value, false};
      slot = (slot + 1) & mask_;
    }
    used_[slot] = 1;
    slots_[slot] = Slot{key, value};
    ++size_;
    return {&slots_[slot].value, true};
  }

  // Inserts or overwrites.
  void InsertOrAssign(const Key& key, const Value& value) {
    auto [stored, inserted] = Insert(key, value);
    if (!inserted) *stored = value;
  }

  // Erases `key` if present; returns whether it was. Backward-shift deletion keeps every probe
  // sequence contiguous, so no tombstones accumulate.
  bool Erase(const Key& key) {
    size_t hole = FindSlot(key);
    if (hole == kNotFound) return false;
    size_t next = (hole + 1) & mask_;
    while (used_[next]) {
      const size_t home = Home(slots_[next].key);
      // Move `next` into the hole unless its home lies cyclically in (hole, next].
      const bool stays = ((next - home) & mask_) < ((next - hole) & mask_);
      if (!stays) {
        slots_[hole] = slots_[next];
        hole = next;
      }
      next = (next + 1) & mask_;
    }
    used_[hole] = 0;
    --size_;
    return true;
  }

  void Clear() {
    std::fill(used_.begin(), used_.end(), uint8_t{0});
    size_ = 0;
  }

  // Calls fn(key, value) for every entry, in slot order (not a deterministic order across builds
  // of the table: use only for order-independent work such as accounting).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (used_[i]) fn(slots_[i].key, slots_[i].value);
    }
  }

 private:
  struct Slot {
    Key key;
    Value value;
  };
  static constexpr size_t kNotFound = ~size_t{0};

  [[nodiscard]] size_t Home(const Key& key) const { return Hash{}(key)&mask_; }

  [[nodiscard]] size_t FindSlot(const Key& key) const {
    size_t slot = Home(key);
    while (used_[slot]) {
      if (slots_[slot].key == key) return slot;
      slot = (slot + 1) & mask_;
    }
    return kNotFound;
  }

  void Rehash(size_t new_capacity) {
    std::vector<Slot> old_slots = std::move(slots_);
    std::vector<uint8_t> old_used = std::move(used_);
    slots_.assign(new_capacity, Slot{});
    used_.assign(new_capacity, 0);
    mask_ = new_capacity - 1;
    size_ = 0;
    for (size_t i = 0; i < old_slots.size(); ++i) {
      if (old_used[i]) Insert(old_slots[i].key, old_slots[i].value);
    }
  }

  std::vector<Slot> slots_;
  std::vector<uint8_t> used_;  // metadata apart from slots, as in abseil's flat_hash_map
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace feather
