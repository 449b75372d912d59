// mdl::DevicePool (src/device_pool.h), the memory of DeviceArrays kept for later ones, on a
// device of host memory that counts its allocations: a block let go is taken again for
// the same size, not for another; a block handed to a DLPack consumer is freed, never
// taken again; the pool keeps no more than the largest call handed out, the oldest going.
#include <cstdlib>
#include <new>

#include "check.h"
#include "src/device_pool.h"

namespace {

int allocations = 0, releases = 0;

void* allocate(std::size_t bytes) {
  ++allocations;
  void* p = std::calloc(1, bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

void release(void* p) {
  ++releases;
  std::free(p);
}

mdl::Device counting() {
  mdl::Device d{};
  d.name = "counting";
  d.allocate = allocate;
  d.release = release;
  return d;
}

void blocks_let_go_are_taken_again_for_their_size() {
  const mdl::Device device = counting();
  mdl::DevicePool pool;
  pool.handed(300);
  char* first;
  {
    auto a = pool.take(&device, 100);
    first = a->data();
    CHECK(first && a->size() == 100 && allocations == 1);
  }
  CHECK(pool.kept_bytes() == 100 && releases == 0);
  auto other = pool.take(&device, 200);  // another size: new memory
  CHECK(other->data() != first && allocations == 2);
  auto again = pool.take(&device, 100);
  CHECK(again->data() == first && allocations == 2 && pool.kept_bytes() == 0);
  auto held = pool.take(&device, 100);  // the kept one is held: new memory
  CHECK(held->data() != first && allocations == 3);
}

void a_block_handed_through_dlpack_is_freed() {
  const mdl::Device device = counting();
  mdl::DevicePool pool;
  pool.handed(1000);
  const int released = releases;
  {
    auto a = pool.take(&device, 64);
    a->exported = true;
  }
  CHECK(releases == released + 1 && pool.kept_bytes() == 0);
}

void it_keeps_at_most_what_a_call_handed_out() {
  const mdl::Device device = counting();
  mdl::DevicePool pool;
  pool.handed(250);
  const int released = releases;
  {
    auto a = pool.take(&device, 100), b = pool.take(&device, 100);
    auto c = pool.take(&device, 100), big = pool.take(&device, 300);
  }  // let go in reverse: big (over the bound: freed), c, b, then a pushes c out
  CHECK(pool.kept_bytes() == 200 && releases == released + 2);
  {
    auto none = pool.take(&device, 0);
    CHECK(none->data() == nullptr && none->size() == 0);
  }
  CHECK(pool.kept_bytes() == 200);
}

}  // namespace

int main() {
  blocks_let_go_are_taken_again_for_their_size();
  a_block_handed_through_dlpack_is_freed();
  it_keeps_at_most_what_a_call_handed_out();
  return check::failures;
}
