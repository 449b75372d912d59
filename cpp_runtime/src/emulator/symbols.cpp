// Kernels' names for the emulator's reports, from their addresses: the dynamic symbol
// table where dladdr finds one, else the shared object's own symbol table (kernels of a
// module built with hidden visibility are only there), demangled without the parameters.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emulator.h"

namespace mdl {
namespace emulated {
namespace {

struct Symbol {
  uintptr_t start, size;
  std::string name;
};

// The function symbols of an ELF file's .symtab, by offset from its load address.
std::vector<Symbol> read_symbols(const char* path) {
  std::vector<Symbol> out;
  int fd = open(path, O_RDONLY);
  if (fd < 0) return out;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < long(sizeof(Elf64_Ehdr))) {
    close(fd);
    return out;
  }
  void* m = mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return out;
  const char* base = static_cast<const char*>(m);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
      eh->e_shoff + eh->e_shnum * sizeof(Elf64_Shdr) <= std::size_t(st.st_size)) {
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (sections[i].sh_type != SHT_SYMTAB || sections[i].sh_link >= eh->e_shnum) continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sections[i].sh_offset);
      const char* names = base + sections[sections[i].sh_link].sh_offset;
      for (std::size_t k = 0; k < sections[i].sh_size / sizeof(Elf64_Sym); ++k)
        if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC && syms[k].st_value)
          out.push_back({syms[k].st_value, syms[k].st_size, names + syms[k].st_name});
    }
  }
  munmap(m, st.st_size);
  return out;
}

std::string demangled(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && text ? text.get() : mangled;
  // "void ns::kernel<32, float>(args)" -> "ns::kernel<32, float>"
  int depth = 0;
  for (std::size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0 && i > 0 && name[i - 1] != ' ') {
      name.resize(i);
      break;
    }
  }
  if (name.rfind("void ", 0) == 0) name = name.substr(5);
  const std::string anonymous = "(anonymous namespace)::";
  for (std::size_t at; (at = name.find(anonymous)) != std::string::npos;)
    name.erase(at, anonymous.size());
  return name;
}

}  // namespace

std::string kernel_name(const void* kernel) {
  static std::mutex lock;
  static std::map<std::string, std::vector<Symbol>> files;
  Dl_info info{};
  if (dladdr(kernel, &info) && info.dli_sname && info.dli_saddr == kernel)
    return demangled(info.dli_sname);
  if (info.dli_fname) {
    std::lock_guard<std::mutex> hold(lock);
    auto it = files.find(info.dli_fname);
    if (it == files.end()) it = files.emplace(info.dli_fname, read_symbols(info.dli_fname)).first;
    const uintptr_t offset = uintptr_t(kernel) - uintptr_t(info.dli_fbase);
    for (const Symbol& s : it->second)
      if (offset >= s.start && offset < s.start + std::max<uintptr_t>(s.size, 1))
        return demangled(s.name);
  }
  char text[32];
  std::snprintf(text, sizeof text, "%p", kernel);
  return std::string("the kernel at ") + text;
}

}  // namespace emulated
}  // namespace mdl
