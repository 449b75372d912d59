// Call::result_memory (mdl/model.h): memory for a result that is handed to Python uncopied.
#include "mdl/model.h"

namespace mdl {

char* Call::result_memory(char* slot, std::size_t bytes) {
  if (!fresh || bytes < kCopiedResultBytes) return slot;
  memory.push_back(result_pool().take(bytes));
  handed += memory.back()->size();
  result_pool().handed(handed);
  return memory.back()->data();
}

}  // namespace mdl
