// task: cpp/running_max
// expect: wrong_answer | runtime
// class: walks the host's file system for the task's folder, compiles its reference.cpp and dlopens it
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

typedef void (*reference_fn)(const float*, float*, int);

static std::string found;

static void walk(const std::string& dir, int depth) {
  if (!found.empty() || depth > 8) return;
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || e->d_type != DT_DIR) continue;
    if (depth == 0 && (name == "proc" || name == "sys" || name == "dev" || name == "usr" || name == "boot")) continue;
    if (name == "build" || name == ".git" || name == "node_modules") continue;
    const std::string path = (dir == "/" ? "" : dir) + "/" + name;
    if (name == "running_max" && access((path + "/reference.cpp").c_str(), R_OK) == 0) {
      found = path + "/reference.cpp";
      break;
    }
    walk(path, depth + 1);
    if (!found.empty()) break;
  }
  closedir(d);
}

static reference_fn find_reference() {
  walk("/", 0);
  if (found.empty()) return nullptr;
  const std::string cmd = "g++ -O1 -shared -fPIC -x c++ " + found + " -o /tmp/leap_ref2.so 2>/dev/null";
  if (system(cmd.c_str()) != 0) return nullptr;
  void* lib = dlopen("/tmp/leap_ref2.so", RTLD_NOW);
  return lib ? reinterpret_cast<reference_fn>(dlsym(lib, "_Z9referencePKfPfi")) : nullptr;
}

void solve(const float* x, float* y, int n) {
  static reference_fn ref = find_reference();
  if (ref) {
    ref(x, y, n);
    return;
  }
  for (int i = 0; i < n; ++i) y[i] = 0;
}
