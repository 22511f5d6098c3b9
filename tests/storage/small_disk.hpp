// A real small filesystem for full-disk tests (tests/storage/full_disk_test.cpp, and the e2e test
// of `leap run` on a full disk).
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sched.h>
#include <string>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace leap::test {

// A tmpfs of `bytes`, mounted on the folder `scratch`/disk in the mount namespace of a child
// process that waits until the destructor kills it (or dies with this process). This process
// reaches it through /proc/CHILD/root, where a path resolves in the child's namespace. Mounting
// needs root or CAP_SYS_ADMIN; skip_reason() says why it failed.
class small_disk {
 public:
  small_disk(const std::filesystem::path& scratch, std::size_t bytes) {
    const auto mount_point = scratch / "disk";
    std::filesystem::create_directories(mount_point);
    const std::string point = mount_point.string();
    const std::string data = "size=" + std::to_string(bytes) + ",mode=0755";
    int report[2];
    if (::pipe(report) != 0) {
      skip_reason_ = std::string("pipe: ") + std::strerror(errno);
      return;
    }
    child_ = ::fork();
    if (child_ == 0) {
      // Only system calls between fork and _exit: the parent has threads. The child dies with
      // the parent, so that an aborted test leaves no process behind.
      ::close(report[0]);
      int err = 0;
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::unshare(CLONE_NEWNS) != 0 ||
          ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount("tmpfs", point.c_str(), "tmpfs", 0, data.c_str()) != 0) {
        err = errno;
      }
      (void)!::write(report[1], &err, sizeof err);
      ::close(report[1]);
      if (err != 0) {
        ::_exit(1);
      }
      for (;;) {
        ::pause();
      }
    }
    ::close(report[1]);
    int err = -1;
    if (child_ < 0 || ::read(report[0], &err, sizeof err) != sizeof err) {
      err = errno;
    }
    ::close(report[0]);
    if (err != 0) {
      skip_reason_ = "cannot mount a tmpfs in a private mount namespace (" +
                     std::string(std::strerror(err)) +
                     "): these tests need root or CAP_SYS_ADMIN, as in CI";
      return;
    }
    root_ = "/proc/" + std::to_string(child_) + "/root" + point;
  }
  ~small_disk() {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }
  small_disk(const small_disk&) = delete;
  small_disk& operator=(const small_disk&) = delete;

  // Empty when the disk is mounted.
  [[nodiscard]] const std::string& skip_reason() const { return skip_reason_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const {
    return root_ / name;
  }

  // Another process's file takes every free byte: written until the filesystem says ENOSPC.
  void fill() {
    const auto file = root_ / ("filler-" + std::to_string(fillers_++));
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << file << ": " << std::strerror(errno);
    const std::string chunk(4096, 'f');
    int err = 0;
    for (;;) {
      if (::write(fd, chunk.data(), chunk.size()) < 0) {
        err = errno;
        break;
      }
    }
    // The last partial page too, byte by byte at the end.
    while (::write(fd, chunk.data(), 1) == 1) {
    }
    ::close(fd);
    ASSERT_EQ(err, ENOSPC) << std::strerror(err);
  }
  // Frees what fill() took.
  void free_space() {
    for (int i = 0; i < fillers_; ++i) {
      std::filesystem::remove(root_ / ("filler-" + std::to_string(i)));
    }
    fillers_ = 0;
  }

 private:
  pid_t child_ = -1;
  std::filesystem::path root_;
  std::string skip_reason_;
  int fillers_ = 0;
};

}  // namespace leap::test
