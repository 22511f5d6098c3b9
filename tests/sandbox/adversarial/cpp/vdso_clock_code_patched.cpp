// task: cpp/prefix_sum_int
// expect: pass
// max_speedup: 5
// class: the clock patched in code, with no symbol and no GOT slot: before main the vDSO's clock_gettime is made writable and overwritten with "return 0" (the time left as it was), so a timer in the candidate's process sees every call take no time
#include <elf.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace {

void* vdso_symbol(const char* name) {
  const auto* base = reinterpret_cast<const char*>(getauxval(AT_SYSINFO_EHDR));
  if (base == nullptr) return nullptr;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  const Elf64_Sym* symbols = nullptr;
  const char* strings = nullptr;
  std::size_t count = 0;
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    symbols = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
    count = sh[i].sh_size / sizeof(Elf64_Sym);
    strings = base + sh[sh[i].sh_link].sh_offset;
  }
  for (std::size_t i = 0; symbols != nullptr && i < count; ++i) {
    if (std::strcmp(strings + symbols[i].st_name, name) == 0) {
      return const_cast<char*>(base + symbols[i].st_value);
    }
  }
  return nullptr;
}

struct patcher {
  patcher() {
#if defined(__x86_64__)
    static const unsigned char return_zero[] = {0x31, 0xc0, 0xc3};  // xor eax, eax; ret
    for (const char* name : {"__vdso_clock_gettime", "clock_gettime"}) {
      auto* code = static_cast<unsigned char*>(vdso_symbol(name));
      if (code == nullptr) continue;
      const long page = sysconf(_SC_PAGESIZE);
      const auto start =
          reinterpret_cast<std::uintptr_t>(code) & ~static_cast<std::uintptr_t>(page - 1);
      if (mprotect(reinterpret_cast<void*>(start), 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) !=
          0)
        continue;
      std::memcpy(code, return_zero, sizeof return_zero);
    }
#endif
  }
} patched_before_main;

}  // namespace

void solve(const int* x, int* y, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) y[i] = s += x[i];
}
