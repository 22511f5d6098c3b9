// task: cuda/vector_add
// expect: wrong_answer
// class: atexit handler rewrites the dump file, clearing the "input was modified" flags of a kernel that writes into its input
// feedback: wrote into its input 'a'
// gpu: true
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static void clear_flags() {
  FILE* f = std::fopen("out.bin", "r+b");
  if (!f) return;
  std::vector<unsigned char> b;
  int ch;
  while ((ch = std::fgetc(f)) != EOF) b.push_back(static_cast<unsigned char>(ch));
  if (b.size() < 16) return;
  std::uint32_t trials;
  std::memcpy(&trials, b.data() + 12, 4);
  std::size_t pos = 16;
  for (std::uint32_t t = 0; t < trials && pos + 27 <= b.size(); ++t) {
    b[pos] = 0;  // a
    pos += 9;
    b[pos] = 0;  // b
    pos += 9;
    std::uint64_t count;
    std::memcpy(&count, b.data() + pos + 1, 8);
    pos += 9 + count * 4;  // c
  }
  std::fseek(f, 0, SEEK_SET);
  std::fwrite(b.data(), 1, b.size(), f);
  std::fclose(f);
}

__global__ void add_in_place(float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    a[i] += b[i];  // the input as scratch
    c[i] = a[i];
  }
}

void solve(const float* a, const float* b, float* c, int n) {
  static bool registered = false;
  if (!registered) registered = (std::atexit(clear_flags) == 0);
  add_in_place<<<(n + 255) / 256, 256>>>(const_cast<float*>(a), b, c, n);
}
