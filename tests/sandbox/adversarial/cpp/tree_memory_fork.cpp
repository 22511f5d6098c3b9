// task: cpp/prefix_sum_int
// expect: runtime | timeout
// class: 16 forked children each hold memory below the per-process limit, far above the run's together
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <cstring>

// 16 children of 80 MiB: each is far below the per-process address-space limit, together they hold
// 1.25 GiB of touched memory (more than the run may use); only then is the answer computed.
static void hold_memory_in_children() {
  const int children = 16;
  const size_t bytes = 80u << 20;
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return;
  for (int i = 0; i < children; ++i) {
    if (fork() == 0) {
      close(go[1]);
      void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      char* block = map == MAP_FAILED ? nullptr : static_cast<char*>(map);
      if (block) madvise(block, bytes, MADV_HUGEPAGE);  // fewer page faults: quicker to fill
      if (block) memset(block, 1, bytes);
      asm volatile("" : : "r"(block) : "memory");  // the block is kept, not optimised away
      char c = block ? 'r' : 'f';
      if (write(ready[1], &c, 1) != 1) _exit(1);
      if (read(go[0], &c, 1) < 0) _exit(1);
      _exit(0);
    }
  }
  for (int got = 0; got < children;) {
    char c;
    if (read(ready[0], &c, 1) != 1) break;
    ++got;
  }
  close(go[1]);
  while (wait(nullptr) > 0) {
  }
}

void solve(const int* x, int* y, int n) {
  static bool once = (hold_memory_in_children(), true);
  (void)once;
  int s = 0;
  for (int i = 0; i < n; ++i) y[i] = s += x[i];
}
