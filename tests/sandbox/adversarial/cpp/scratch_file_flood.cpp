// task: cpp/gcd_pairs
// expect: runtime
// class: writes a 600 MiB cache of 19200 small files into its working folder (gigabytes at scale) before answering
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>

// A "lookup cache" spread over many small files: every write is checked, so a full disk is fatal.
static void write_cache() {
  static char chunk[32 << 10];
  memset(chunk, 7, sizeof chunk);
  mkdir("cache", 0700);
  for (int i = 0; i < 19200; ++i) {
    char name[64];
    snprintf(name, sizeof name, "cache/%05d.bin", i);
    FILE* f = fopen(name, "wb");
    if (!f) abort();
    if (fwrite(chunk, 1, sizeof chunk, f) != sizeof chunk) abort();
    if (fclose(f) != 0) abort();
  }
}

void solve(const int* a, const int* b, int* g, int n) {
  static bool once = (write_cache(), true);
  (void)once;
  for (int i = 0; i < n; ++i) {
    int x = a[i], y = b[i];
    while (y != 0) {
      int r = x % y;
      x = y;
      y = r;
    }
    g[i] = x;
  }
}
