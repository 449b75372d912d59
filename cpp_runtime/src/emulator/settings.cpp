// The emulated device's settings, from the environment variable MDL_CUDA_EMULATOR, a list
// of words separated by commas or spaces:
//   threads=forward|reverse|shuffle  the order in which a block's threads run between
//                                    barriers (default forward)
//   blocks=forward|reverse|shuffle   the order of a grid's blocks (default forward)
//   order=...                        both at once
//   seed=N                           the shuffles' seed (default 0)
//   deferred                         queued work runs only when its stream is synchronized
//   fibers                           every kernel on fibers, none on the fast path
//   memory=N[K|M|G]                  the device's memory in bytes (default: half of the
//                                    machine's); cudaMalloc past it fails, as on a GPU
// It is read again whenever it changes, so a test can switch orders between calls.
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>

#include "emulator.h"

namespace mdl {
namespace emulated {
namespace {

Order order(const std::string& word, const std::string& value) {
  if (value == "forward") return Order::Forward;
  if (value == "reverse") return Order::Reverse;
  if (value == "shuffle") return Order::Shuffle;
  throw Violation("MDL_CUDA_EMULATOR: " + word + "=" + value +
                  ": an order is forward, reverse or shuffle");
}

// `N`, `NK`, `NM` or `NG` (powers of 1024) bytes, at least one.
std::size_t bytes(const std::string& word, const std::string& value) {
  const std::size_t digits = value.find_first_not_of("0123456789");
  const std::string unit = digits == std::string::npos ? "" : value.substr(digits);
  const int shift = unit.empty() ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : -1;
  const std::string number = value.substr(0, value.size() - unit.size());
  const std::size_t n = number.empty() || number.size() > 15 ? 0 : std::stoull(number);
  if (number.empty() || shift < 0 || number.size() > 15 || (n << shift) >> shift != n)
    throw Violation("MDL_CUDA_EMULATOR: " + word + ": memory= takes a number of bytes, with K, "
                    "M or G after it for KiB, MiB or GiB (memory=2G)");
  if (n == 0) throw Violation("MDL_CUDA_EMULATOR: " + word + ": the device needs some memory");
  return n << shift;
}

// A shuffle's seed: 0 to 2**64 - 1, in decimal (std::stoull alone took `-1` and threw
// std::out_of_range past 2**64 - 1, which reached Python as `IndexError: stoull`).
std::uint64_t seed(const std::string& word, const std::string& value) {
  const std::uint64_t most = ~std::uint64_t(0);
  std::uint64_t n = 0;
  bool ok = !value.empty() && value.size() <= 20;
  for (char c : value) {
    const unsigned digit = static_cast<unsigned char>(c) - '0';
    ok = ok && digit <= 9 && n <= (most - digit) / 10;
    if (!ok) break;
    n = n * 10 + digit;
  }
  if (!ok)
    throw Violation("MDL_CUDA_EMULATOR: " + word + ": seed= takes a number from 0 to "
                    "2**64 - 1 (seed=7)");
  return n;
}

Settings parse(const std::string& text) {
  Settings s;
  std::string words = text;
  for (char& c : words)
    if (c == ',') c = ' ';
  std::istringstream in(words);
  for (std::string word; in >> word;) {
    const auto eq = word.find('=');
    const std::string key = word.substr(0, eq),
                      value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (key == "threads" || key == "order") s.threads = order(key, value);
    if (key == "blocks" || key == "order") s.blocks = order(key, value);
    if (key == "threads" || key == "blocks" || key == "order") continue;
    if (key == "seed")
      s.seed = seed(word, value);
    else if (word == "deferred")
      s.deferred = true;
    else if (word == "fibers")
      s.fibers = true;
    else if (key == "memory")
      s.memory = bytes(word, value);
    else
      throw Violation("MDL_CUDA_EMULATOR: unknown setting '" + word +
                      "' (settings: threads=, blocks= or order=forward|reverse|shuffle, "
                      "seed=N, deferred, fibers, memory=N[K|M|G])");
  }
  return s;
}

}  // namespace

const Settings& settings() {
  static std::mutex lock;
  static std::string seen;
  static Settings current;
  std::lock_guard<std::mutex> hold(lock);
  const char* text = std::getenv("MDL_CUDA_EMULATOR");
  const std::string now = text ? text : "";
  if (now != seen) {
    current = parse(now);  // a bad value keeps the old settings and throws
    seen = now;
  }
  return current;
}

}  // namespace emulated
}  // namespace mdl
