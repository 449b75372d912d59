// mdl::Arena (the per-call buffer of the memory plan), mdl::ResultPool (results' memory
// kept for later calls) and mdl::Tape (a While loop's record stack): alignment, growth,
// reuse and its bounds, and records that survive growth.
#include <cstdint>
#include <cstring>

#include "check.h"
#include "mdl/arena.h"
#include "mdl/result_pool.h"

namespace {

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % mdl::kAlign == 0; }

void arena_grows_aligned_and_keeps_a_large_enough_buffer() {
  mdl::Arena arena;
  CHECK(arena.size() == 0);
  arena.reserve(100);
  CHECK(arena.data() != nullptr && aligned(arena.data()));
  CHECK(arena.size() >= 100 && arena.size() % mdl::kAlign == 0);
  std::memset(arena.data(), 1, 100);  // the whole reservation is writable (ASan checks it)
  char* first = arena.data();
  arena.reserve(50);  // smaller: the buffer stays, so a planned call allocates nothing
  CHECK(arena.data() == first);
  arena.reserve(1 << 20);
  CHECK(aligned(arena.data()) && arena.size() >= (1u << 20));
  std::memset(arena.data(), 2, 1 << 20);
}

// Slots of one size laid out one after another (a plan's [32, 256] floats, 32 KiB each)
// start at distinct offsets modulo 4 KiB, so that a loop streaming several of them does not
// find its loads and stores to the same 4 KiB offset taken for one another.
void equal_slots_start_at_distinct_offsets_modulo_4k() {
  for (std::size_t bytes : {std::size_t(512), std::size_t(1) << 10, std::size_t(2) << 10,
                            std::size_t(4) << 10, std::size_t(32) << 10, std::size_t(1) << 20}) {
    bool seen[4096 / mdl::kAlign] = {};
    std::size_t off = 0;
    for (int k = 0; k < 16; ++k, off += mdl::slot_bytes(bytes)) {
      CHECK(off % mdl::kAlign == 0 && !seen[off % 4096 / mdl::kAlign]);
      seen[off % 4096 / mdl::kAlign] = true;
    }
  }
}

void arena_maps_large_buffers_at_huge_page_boundaries() {
  const std::size_t bytes = 5 * mdl::kHugeBytes / 2 + 64;  // not a whole number of pages
  mdl::Arena arena;
  arena.reserve(bytes);
#if defined(MADV_HUGEPAGE)
  if (mdl::huge_pages())
    CHECK(reinterpret_cast<std::uintptr_t>(arena.data()) % mdl::kHugeBytes == 0);
#endif
  CHECK(aligned(arena.data()) && arena.size() >= bytes);
  std::memset(arena.data(), 3, bytes);  // every byte is mapped
  mdl::give_back(arena.data(), arena.size());  // whole pages only: the last byte stays
  mdl::Arena other;
  other.reserve(bytes);  // the first's trimmed ends left nothing behind that overlaps
  std::memset(other.data(), 4, bytes);
  CHECK(arena.data()[0] == 0 && arena.data()[bytes - 1] == 3 && other.data()[bytes - 1] == 4);
}

void result_pool_reuses_blocks_let_go_within_its_bounds() {
  mdl::ResultPool pool;
  const std::size_t mib = std::size_t(1) << 20;
  pool.handed(3 * mib);  // the largest call's results: what the pool may keep
  char* first;
  {
    auto a = pool.take(mib);
    first = a->data();
    CHECK(aligned(first) && a->size() == mib);
    std::memset(first, 7, mib);
    CHECK(pool.kept_bytes() == 0);
  }
  CHECK(pool.kept_bytes() == mib);  // let go: kept
  auto other = pool.take(2 * mib);  // another size: new memory
  CHECK(other->data() != first && pool.kept_bytes() == mib);
  auto again = pool.take(mib);      // the same size: the kept block, as it was
  CHECK(again->data() == first && again->data()[mib - 1] == 7 && pool.kept_bytes() == 0);
  again.reset();
  other.reset();
  CHECK(pool.kept_bytes() == 3 * mib);
  {
    auto b = pool.take(3 * mib);    // new; let go, it pushes out the oldest blocks
  }
  CHECK(pool.kept_bytes() == 3 * mib);
  auto c = pool.take(mib);  // both older blocks went: no 1 MiB block is left to take
  CHECK(pool.kept_bytes() == 3 * mib);
  c.reset();  // kept, and the 3 MiB block goes
  CHECK(pool.kept_bytes() == mib);
  pool.handed(64 * mib);
  pool.take(mdl::kGiveBackBytes).reset();  // memory worth giving back is not kept
  CHECK(pool.kept_bytes() == mib);
}

void tape_keeps_records_in_push_order_across_growth() {
  mdl::Tape tape;
  const int n = 10000;  // enough pushes to grow the storage many times
  for (int i = 0; i < n; ++i) {
    int64_t record[2] = {i, -i};
    tape.push(record, sizeof record);
  }
  CHECK(tape.used() == n * 2 * sizeof(int64_t));
  tape.push(nullptr, 0);  // a record of no bytes (a batch of no rows) adds nothing
  CHECK(tape.used() == n * 2 * sizeof(int64_t));
  bool in_order = true;
  for (int i = 0; i < n; ++i) {
    int64_t record[2];
    std::memcpy(record, tape.data() + i * sizeof record, sizeof record);
    in_order = in_order && record[0] == i && record[1] == -i;
  }
  CHECK(in_order);
  tape.clear();
  CHECK(tape.used() == 0);
}

}  // namespace

int main() {
  arena_grows_aligned_and_keeps_a_large_enough_buffer();
  arena_maps_large_buffers_at_huge_page_boundaries();
  equal_slots_start_at_distinct_offsets_modulo_4k();
  result_pool_reuses_blocks_let_go_within_its_bounds();
  tape_keeps_records_in_push_order_across_growth();
  return check::failures;
}
