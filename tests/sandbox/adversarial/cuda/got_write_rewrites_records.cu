// task: cuda/vector_add
// expect: wrong_answer
// class: the result stream rewritten from inside the process: the GOT slot of write() is patched (no symbol defined) to fake every call's time and the hash of the input solve() wrote into
// feedback: wrote into its input
// gpu: true
#include <cuda_runtime.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace {

using write_fn = ssize_t (*)(int, const void*, size_t);
write_fn real_write = nullptr;
std::uint64_t hash_before = 0;  // the input's hash as the caller gave it

// The harness's input hash, copied from its published generator.
std::uint64_t harness_hash(const unsigned char* p, std::size_t n) {
  std::uint64_t h = 0x9E3779B97F4A7C15ULL * (n + 1);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ULL;
  return h ^ (h >> 32);
}

// A call record: 'C', u32 call, f64 ms, then a's u64 count and u64 hash, then b's, then c.
ssize_t rewriting_write(int fd, const void* buf, size_t n) {
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(buf));
  if (n > 29 && bytes[0] == 'C') {
    const double ms = 1e-6;
    std::memcpy(bytes + 5, &ms, 8);
    std::memcpy(bytes + 21, &hash_before, 8);
  }
  return real_write(fd, buf, n);
}

struct patch {
  const char* name;
  void* replacement;
  void* old;
};

void patch_slot(const ElfW(Rela) * relocs, std::size_t bytes, const ElfW(Sym) * symbols,
                const char* strings, ElfW(Addr) base, patch& p) {
  for (std::size_t i = 0; i < bytes / sizeof(ElfW(Rela)); ++i) {
    const ElfW(Sym)& s = symbols[ELF64_R_SYM(relocs[i].r_info)];
    if (std::strcmp(strings + s.st_name, p.name) != 0) continue;
    auto** slot = reinterpret_cast<void**>(base + relocs[i].r_offset);
    const long page = sysconf(_SC_PAGESIZE);
    auto start = reinterpret_cast<std::uintptr_t>(slot) & ~static_cast<std::uintptr_t>(page - 1);
    mprotect(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE);
    p.old = *slot;
    *slot = p.replacement;
  }
}

int patch_main_executable(dl_phdr_info* info, size_t, void* data) {
  auto& p = *static_cast<patch*>(data);
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
  patch p{"write", reinterpret_cast<void*>(&rewriting_write), nullptr};
  dl_iterate_phdr(&patch_main_executable, &p);
  real_write = p.old != nullptr ? reinterpret_cast<write_fn>(p.old) : &::write;
}

}  // namespace

__global__ void add_in_place(float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    a[i] += b[i];  // the input as scratch space
    c[i] = a[i];
  }
}

void solve(const float* a, const float* b, float* c, int n) {
  static float host[1 << 20];
  cudaMemcpy(host, a, sizeof(float) * n, cudaMemcpyDeviceToHost);
  hash_before = harness_hash(reinterpret_cast<const unsigned char*>(host), sizeof(float) * n);
  add_in_place<<<(n + 255) / 256, 256>>>(const_cast<float*>(a), b, c, n);
}
