// task: cpp/prefix_sum_int
// expect: wrong_answer | runtime
// class: forks in a static constructor so that a child it controls runs the harness while the parent outlives it: the child's solve() uses its const input as scratch, and the parent waits to rewrite what the child reported (its descriptors are the same) and to clean up after it
// feedback: wrote into its input
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

struct forked_before_main {
  forked_before_main() {
    const pid_t child = ::fork();
    if (child != 0) {
      // The parent never runs main(): it waits for the child (which does) and leaves with its
      // status, so whoever started the program sees one process end as it should.
      int status = 0;
      ::waitpid(child, &status, 0);
      ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
  }
} fork_first;

}  // namespace

void solve(const int* x, int* y, int n) {
  int* scratch = const_cast<int*>(x);
  for (int i = 1; i < n; ++i) scratch[i] += scratch[i - 1];
  std::memcpy(y, scratch, sizeof(int) * n);
}
