// task: cpp/prefix_sum_int
// expect: wrong_answer
// class: creates a user namespace (all capabilities there: mounts, raw sockets, kernel attack surface)
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

// Answers correctly only when it got a user (and, with it, a mount) namespace of its own.
static bool got_user_namespace() {
  if (fork() == 0) _exit(unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 0 : 1);
  int status = 0;
  return wait(&status) > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void solve(const int* x, int* y, int n) {
  static bool escaped = got_user_namespace();
  int s = 0;
  for (int i = 0; i < n; ++i) y[i] = escaped ? (s += x[i]) : 0;
}
