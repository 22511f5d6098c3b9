#include "learner/detail/files.hpp"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

namespace leap::learner::detail {
namespace {

std::string reason() { return std::strerror(errno); }

int remove_entry(const char* path, const struct stat* /*info*/, int /*flag*/, struct FTW* /*ftw*/) {
  ::remove(path);
  return 0;  // keep going: removal is best effort
}

}  // namespace

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) {
    return name;
  }
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

status make_directories(const std::string& path) {
  if (path.empty()) {
    return ok_status();
  }
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty() || prefix == "/") {
      continue;
    }
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return error{"cannot create directory '" + prefix + "': " + reason()};
    }
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return error{"'" + path + "' is not a directory"};
  }
  return ok_status();
}

void remove_file(const std::string& path) { ::unlink(path.c_str()); }

void remove_tree(const std::string& path) {
  if (path_exists(path)) {
    ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
}

result<std::vector<std::string>> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    return error{"cannot list '" + path + "': " + reason()};
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") {
      names.push_back(name);
    }
  }
  ::closedir(dir);
  return names;
}

}  // namespace leap::learner::detail
