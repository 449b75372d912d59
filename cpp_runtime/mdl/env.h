// On/off settings read from the environment (MDL_HUGE_PAGES, MDL_CUDA_GRAPHS): one reading
// of their values for every setting.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mdl {

// `name`'s value: unset or empty, `fallback`; "1" on; "0" off. Any other value throws
// std::invalid_argument (a ValueError in Python) naming the variable and what it takes:
// `MDL_CUDA_GRAPHS=off` once read as on, as did every value but "0".
inline bool env_switch(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  const std::string text(value);
  if (text == "1") return true;
  if (text == "0") return false;
  throw std::invalid_argument(std::string(name) + "='" + text +
                              "': expected 0 (off) or 1 (on)");
}

}  // namespace mdl
