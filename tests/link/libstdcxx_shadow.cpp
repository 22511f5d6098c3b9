// A stand-in for pip's libtorch.so, which exports its own copies of libstdc++'s std::filesystem
// functions: this library defines one of them under libstdc++'s own mangled name, so that a binary
// linked against it shows which copy its calls bind to.
#include <cstdint>
#include <filesystem>

namespace std::filesystem {  // NOLINT(cert-dcl58-cpp): shadowing libstdc++ is the point

std::uintmax_t remove_all(const path& /*p*/) { return 424242; }

}  // namespace std::filesystem

// Referenced by the test so that the library stays in the binary's NEEDED list under --as-needed.
extern "C" int leap_libstdcxx_shadow_marker() { return 7; }
