// The exceptions of the faults kernels find (mdl/faults.h), worded once for every target.
#include "mdl/faults.h"

#include <cstring>
#include <string>

#include "mdl/error.h"

namespace mdl {

void raise_fault(FaultKind kind, int64_t value, int64_t position, int64_t bound,
                 const char* what, const int32_t* outer, int outers) {
  const std::string input = what ? what : "an input";
  const std::string v = std::to_string(value), at = std::to_string(position),
                    n = std::to_string(bound);
  switch (kind) {
    case FaultKind::GatherIndex:
      throw IndexError(input + " holds " + v + " at flat position " + at + ", outside [0, " +
                       n + "): the rows of the table it indexes");
    case FaultKind::Target:
      throw IndexError(input + " holds " + v + " at flat position " + at +
                       ": cross_entropy's targets lie in [0, " + n + "), one per class");
    case FaultKind::ScatterIndex:
      throw IndexError(input + " holds " + v + " at flat position " + at + ", outside [0, " +
                       n + "): the rows of the gradient it adds into");
    case FaultKind::Assert:  // what: the message, the condition, the inputs (its front end)
      throw ValueError(bound > 1 ? input + " at flat position " + at : input);
    case FaultKind::AssertAt: {  // each step before its text: "in step 3 of the `for`"
      std::string said = input + v;
      const char* part = what ? what + std::strlen(what) + 1 : "";
      for (int k = 0; k < outers; ++k) {
        said += part;
        said += std::to_string(outer[k]);
        part += std::strlen(part) + 1;
      }
      said += part;
      throw ValueError(bound > 1 ? said + " at flat position " + at : said);
    }
    case FaultKind::Subscript:
      throw IndexError(input + " is " + v + ", outside [0, " + n +
                       "): the rows of the value it indexes");
    case FaultKind::Length: {  // `what`: the lengths, then "\x1f" and the inputs of
                               // computed ones (codegen/ir/origins.py, LENGTHS_FROM)
      const std::size_t from = input.find('\x1f');
      const std::string name = input.substr(0, from);
      const std::string said =
          name + "[" + at + "] = " + v + " is outside [0, " + n + "] (the sequence length)";
      throw ValueError(from == std::string::npos
                           ? said
                           : said + "; " + name + " is computed from " + input.substr(from + 1));
    }
    default:
      throw Error("a kernel reported fault " + std::to_string(int(kind)) + " (a bug in mdl)");
  }
}

void refuse_dims(const char* const* names, const int64_t* values, int n, const char* text,
                 int64_t value) {
  std::string bound;
  for (int i = 0; i < n; ++i)
    bound += std::string(i ? ", " : "") + names[i] + " = " + std::to_string(values[i]);
  std::string said = text;
  const std::size_t at = said.find("{}");
  if (at != std::string::npos) said.replace(at, 2, std::to_string(value));
  throw ValueError("the inputs' dims (" + bound + ") make " + said);
}

}  // namespace mdl
