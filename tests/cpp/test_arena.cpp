// mdl::Arena (the per-call buffer of the memory plan) and mdl::Tape (a While loop's record
// stack): alignment, growth, and records that survive growth.
#include <cstdint>
#include <cstring>

#include "check.h"
#include "mdl/arena.h"

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

void tape_keeps_records_in_push_order_across_growth() {
  mdl::Tape tape;
  const int n = 10000;  // enough pushes to grow the storage many times
  for (int i = 0; i < n; ++i) {
    int64_t record[2] = {i, -i};
    std::memcpy(tape.push(sizeof record), record, sizeof record);
  }
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
  tape_keeps_records_in_push_order_across_growth();
  return check::failures;
}
