// task: cpp/prefix_sum_int
// expect: wrong_answer | runtime
// class: reads /proc/1/cmdline (the orchestrator's command line), finds the task's reference.cpp on the host, compiles and dlopens it
#include <dlfcn.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

typedef void (*reference_fn)(const int*, int*, int);

static std::string parent(std::string p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos || slash == 0 ? std::string("/") : p.substr(0, slash);
}

// pid 1 of the run is a clone of the orchestrator: its argv[0] is the binary in the source tree's
// build folder (build/tests/...), its arguments may name the task itself.
static reference_fn find_reference() {
  FILE* f = fopen("/proc/1/cmdline", "rb");
  if (!f) return nullptr;
  char buf[8192];
  const size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = 0;
  std::string dir = parent(buf);
  for (int up = 0; up < 6 && dir != "/"; ++up, dir = parent(dir)) {
    const std::string ref = dir + "/sandbox/suite/cpp/prefix_sum_int/reference.cpp";
    if (access(ref.c_str(), R_OK) != 0) continue;
    const std::string cmd = "g++ -O1 -shared -fPIC -x c++ " + ref + " -o /tmp/leap_ref1.so 2>/dev/null";
    if (system(cmd.c_str()) != 0) return nullptr;
    void* lib = dlopen("/tmp/leap_ref1.so", RTLD_NOW);
    return lib ? reinterpret_cast<reference_fn>(dlsym(lib, "_Z9referencePKiPii")) : nullptr;
  }
  return nullptr;
}

void solve(const int* x, int* y, int n) {
  static reference_fn ref = find_reference();
  if (ref) {
    ref(x, y, n);
    return;
  }
  for (int i = 0; i < n; ++i) y[i] = 0;
}
