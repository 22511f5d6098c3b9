// task: cpp/prefix_sum_int
// expect: pass
// max_speedup: 100
// class: the clock patched without defining a symbol: the GOT slot of std::chrono::steady_clock::now is overwritten with a clock that barely moves, so every timed call looks instant
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>

namespace {

std::int64_t fake_ticks = 0;

std::chrono::steady_clock::time_point frozen_now() {
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(++fake_ticks));
}

struct patch {
  const char* name;
  void* replacement;
};

void patch_slot(const ElfW(Rela) * relocs, std::size_t bytes, const ElfW(Sym) * symbols,
                const char* strings, ElfW(Addr) base, const patch& p) {
  for (std::size_t i = 0; i < bytes / sizeof(ElfW(Rela)); ++i) {
    const ElfW(Sym)& s = symbols[ELF64_R_SYM(relocs[i].r_info)];
    if (std::strcmp(strings + s.st_name, p.name) != 0) continue;
    auto** slot = reinterpret_cast<void**>(base + relocs[i].r_offset);
    const long page = sysconf(_SC_PAGESIZE);
    auto start = reinterpret_cast<std::uintptr_t>(slot) & ~static_cast<std::uintptr_t>(page - 1);
    mprotect(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE);
    *slot = p.replacement;
  }
}

int patch_main_executable(dl_phdr_info* info, size_t, void* data) {
  const auto& p = *static_cast<const patch*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') return 0;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  }
  if (dyn == nullptr) return 1;
  auto at = [&](ElfW(Addr) a) { return a < info->dlpi_addr ? a + info->dlpi_addr : a; };
  const ElfW(Sym)* symbols = nullptr;
  const char* strings = nullptr;
  const ElfW(Rela)* plt = nullptr;
  const ElfW(Rela)* rela = nullptr;
  std::size_t plt_bytes = 0, rela_bytes = 0;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_SYMTAB) symbols = reinterpret_cast<const ElfW(Sym)*>(at(d->d_un.d_ptr));
    if (d->d_tag == DT_STRTAB) strings = reinterpret_cast<const char*>(at(d->d_un.d_ptr));
    if (d->d_tag == DT_JMPREL) plt = reinterpret_cast<const ElfW(Rela)*>(at(d->d_un.d_ptr));
    if (d->d_tag == DT_PLTRELSZ) plt_bytes = d->d_un.d_val;
    if (d->d_tag == DT_RELA) rela = reinterpret_cast<const ElfW(Rela)*>(at(d->d_un.d_ptr));
    if (d->d_tag == DT_RELASZ) rela_bytes = d->d_un.d_val;
  }
  if (symbols == nullptr || strings == nullptr) return 1;
  if (plt != nullptr) patch_slot(plt, plt_bytes, symbols, strings, info->dlpi_addr, p);
  if (rela != nullptr) patch_slot(rela, rela_bytes, symbols, strings, info->dlpi_addr, p);
  return 1;
}

__attribute__((constructor)) void install() {
  patch p{"_ZNSt6chrono3_V212steady_clock3nowEv", reinterpret_cast<void*>(&frozen_now)};
  dl_iterate_phdr(&patch_main_executable, &p);
}

}  // namespace

// A correct prefix sum: only its time is faked.
void solve(const int* x, int* y, int n) {
  if (n <= 0) return;
  y[0] = x[0];
  for (int i = 1; i < n; ++i) y[i] = y[i - 1] + x[i];
}
