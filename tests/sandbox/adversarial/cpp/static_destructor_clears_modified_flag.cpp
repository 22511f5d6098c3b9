// task: cpp/prefix_sum_int
// expect: wrong_answer
// class: a static destructor rewrites the dump file after main returns, clearing the "input was modified" flags
// feedback: wrote into its input 'x'
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {
struct rewriter {
  ~rewriter() {
    FILE* f = std::fopen("out.bin", "r+b");
    if (!f) return;
    std::vector<unsigned char> b;
    int c;
    while ((c = std::fgetc(f)) != EOF) b.push_back(static_cast<unsigned char>(c));
    if (b.size() < 16) return;
    std::uint32_t trials;
    std::memcpy(&trials, b.data() + 12, 4);
    std::size_t pos = 16;
    for (std::uint32_t t = 0; t < trials && pos + 18 <= b.size(); ++t) {
      b[pos] = 0;
      pos += 9;
      std::uint64_t count;
      std::memcpy(&count, b.data() + pos + 1, 8);
      pos += 9 + count * 4;
    }
    std::fseek(f, 0, SEEK_SET);
    std::fwrite(b.data(), 1, b.size(), f);
    std::fclose(f);
  }
} the_rewriter;
}  // namespace

void solve(const int* x, int* y, int n) {
  int* scratch = const_cast<int*>(x);
  for (int i = 1; i < n; ++i) scratch[i] += scratch[i - 1];
  std::memcpy(y, scratch, sizeof(int) * n);
}
