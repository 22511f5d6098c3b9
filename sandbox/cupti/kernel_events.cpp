// The events library (issue 34): loaded into every process of a profiled run by the CUDA driver
// through CUDA_INJECTION64_PATH, it records CUPTI's kernel and device activity, which needs no
// GPU counter permission, and at exit writes one JSON line per record to
// "$LEAP_KERNEL_EVENTS.<pid>.jsonl" (sandbox/profile_events.hpp reads them, strictly: this file
// is written from inside the candidate's process). Nothing here may throw or abort the process it
// lives in: a failure to record leaves no file, and the engine's note says so.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cupti.h>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

constexpr std::size_t k_buffer_bytes = 1 << 20;
constexpr std::size_t k_alignment = 8;

std::mutex g_mutex;
std::vector<std::string>* g_lines = nullptr;  // leaked on purpose: read from an atexit handler

// A JSON string of a kernel or device name: quotes, backslashes and control bytes escaped.
std::string quoted(const char* s) {
  std::string out = "\"";
  for (const char* p = s == nullptr ? "" : s; *p != '\0'; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

unsigned dim(std::int32_t v) { return v < 0 ? 0U : static_cast<unsigned>(v); }

void record(const CUpti_Activity* a) {
  char line[512];
  if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
    std::snprintf(line, sizeof line,
                  ",\"device\":%u,\"start\":%" PRIu64 ",\"end\":%" PRIu64
                  ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"registers\":%u,"
                  "\"static_shared\":%u,\"dynamic_shared\":%u,\"shared_executed\":%u}",
                  k->deviceId, k->start, k->end < k->start ? k->start : k->end, dim(k->gridX),
                  dim(k->gridY), dim(k->gridZ), dim(k->blockX), dim(k->blockY), dim(k->blockZ),
                  static_cast<unsigned>(k->registersPerThread), dim(k->staticSharedMemory),
                  dim(k->dynamicSharedMemory), k->sharedMemoryExecuted);
    g_lines->push_back("{\"kind\":\"kernel\",\"name\":" + quoted(k->name) + line);
  } else if (a->kind == CUPTI_ACTIVITY_KIND_DEVICE) {
    const auto* d = reinterpret_cast<const CUpti_ActivityDevice5*>(a);
    std::snprintf(line, sizeof line,
                  ",\"id\":%u,\"cc\":[%u,%u],\"sm_count\":%u,\"max_threads_per_block\":%u,"
                  "\"max_warps_per_sm\":%u,\"max_blocks_per_sm\":%u,\"registers_per_sm\":%u,"
                  "\"registers_per_block\":%u,\"shared_per_sm\":%u,\"shared_per_block\":%u}",
                  d->id, d->computeCapabilityMajor, d->computeCapabilityMinor,
                  d->numMultiprocessors, d->maxThreadsPerBlock, d->maxWarpsPerMultiprocessor,
                  d->maxBlocksPerMultiprocessor, d->maxRegistersPerMultiprocessor,
                  d->maxRegistersPerBlock, d->maxSharedMemoryPerMultiprocessor,
                  d->maxSharedMemoryPerBlock);
    g_lines->push_back("{\"kind\":\"device\",\"name\":" + quoted(d->name) + line);
  }
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(k_alignment, k_buffer_bytes));
  *size = *buffer == nullptr ? 0 : k_buffer_bytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext /*context*/, std::uint32_t /*stream*/,
                               std::uint8_t* buffer, std::size_t /*size*/, std::size_t valid) {
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    CUpti_Activity* a = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
      record(a);
    }
  }
  std::free(buffer);
}

// At exit: every buffer flushed (forced), then the lines written to this process's own file.
void write_events() {
  cuptiActivityFlushAll(1);
  const char* base = std::getenv("LEAP_KERNEL_EVENTS");
  if (base == nullptr || *base == '\0') {
    return;
  }
  const std::string path =
      std::string(base) + "." + std::to_string(static_cast<long>(::getpid())) + ".jsonl";
  const std::lock_guard<std::mutex> lock(g_mutex);
  std::FILE* f = std::fopen(path.c_str(), "we");
  if (f == nullptr) {
    return;
  }
  for (const auto& l : *g_lines) {
    std::fputs(l.c_str(), f);
    std::fputc('\n', f);
  }
  std::fclose(f);
}

}  // namespace

// The driver's entry point for an injection library (CUDA_INJECTION64_PATH): called once, when
// the process first initialises CUDA. 1: initialised.
// NOLINTNEXTLINE(readability-identifier-naming): the name the driver looks up
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  g_lines = new std::vector<std::string>();  // NOLINT(cppcoreguidelines-owning-memory)
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DEVICE) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    return 0;
  }
  std::atexit(write_events);
  return 1;
}
