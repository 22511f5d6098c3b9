// task: cpp/prefix_sum_int
// expect: wrong_answer
// class: atexit handler rewrites the dump file, clearing the "input was modified" flags
// feedback: wrote into its input 'x'
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

static void clear_flags() {
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
    b[pos] = 0;  // x: modified flag
    pos += 9;
    std::uint64_t count;
    std::memcpy(&count, b.data() + pos + 1, 8);
    pos += 9 + count * 4;  // y
  }
  std::fseek(f, 0, SEEK_SET);
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}

void solve(const int* x, int* y, int n) {
  static bool registered = false;
  if (!registered) registered = (std::atexit(clear_flags) == 0);
  int* scratch = const_cast<int*>(x);  // the input as scratch: in place, then copied
  for (int i = 1; i < n; ++i) scratch[i] += scratch[i - 1];
  std::memcpy(y, scratch, sizeof(int) * n);
}
