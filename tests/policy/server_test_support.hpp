// Shared by the policy server's tests: a tiny in-test task suite, a real scripted server on
// 127.0.0.1 (port 0), and an HTTP client with a timeout on every request.
#pragma once

// Debian's libcpp-httplib is compiled with OpenSSL support, and the layout of httplib's classes
// depends on this macro: every translation unit including httplib.h must define it as the library
// was built, or Request/Response disagree in size with the shared library.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#include "policy/server/server.hpp"
#include "policy/wire/wire.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace leap::policy::testing {

inline const char* const vector_add_prompt =
    "Implement `void solve(const float* a, const float* b, float* c, int n)` in CUDA: c = a + b.";
inline const char* const sum_prompt =
    "Implement `void solve(const int* x, int* out, int n)` in C++: out[0] = sum of x.";
inline const char* const reverse_prompt =
    "Write a Python function reverse(s) that returns the string s reversed.";

inline std::vector<scripted_task> tiny_tasks() {
  return {
      {"cuda/vector_add",
       vector_add_prompt,
       "cuda",
       "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
       "  if (i < n) c[i] = a[i] + b[i];\n}\n"
       "void solve(const float* a, const float* b, float* c, int n) {\n"
       "  add<<<(n + 255) / 256, 256>>>(a, b, c, n);\n}\n",
       {{"off_by_one",
         "__global__ void add(const float* a, const float* b, float* c, int n) {\n"
         "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i <= n) c[i] = a[i] + b[i];\n}\n"},
        {"compile_error",
         "void solve(const float* a, const float* b, float* c, int n) {\n"
         "  add<<<n>>>(a, b, c n);\n}\n"}},
       1,
       std::nullopt},
      {"cpp/sum",
       sum_prompt,
       "cpp",
       "void solve(const int* x, int* out, int n) {\n  int s = 0;\n"
       "  for (int i = 0; i < n; ++i) s += x[i];\n  out[0] = s;\n}\n",
       {{"wrong_formula", "void solve(const int* x, int* out, int n) {\n  out[0] = n;\n}\n"},
        {"uninitialised",
         "void solve(const int* x, int* out, int n) {\n  int s;\n"
         "  for (int i = 0; i < n; ++i) s += x[i];\n  out[0] = s;\n}\n"}},
       2,
       std::nullopt},
      {"python/reverse",
       reverse_prompt,
       "python",
       "def reverse(s):\n    return s[::-1]\n",
       {{"identity", "def reverse(s):\n    return s\n"},
        {"syntax_error", "def reverse(s)\n    return s[::-1]\n"}},
       3,
       std::nullopt},
  };
}

inline std::shared_ptr<scripted_backend> make_backend(scripted_config config = {}) {
  if (config.tasks.empty()) {
    config.tasks = tiny_tasks();
  }
  auto backend = scripted_backend::create(std::move(config));
  if (!backend) {
    ADD_FAILURE() << backend.err().message;
    return nullptr;
  }
  return *backend;
}

inline std::unique_ptr<policy_server> start_server(server_config config = {},
                                                   scripted_config scripted = {}) {
  config.host = "127.0.0.1";
  config.port = 0;
  if (config.threads == 256) {
    config.threads = 16;  // the tests' concurrency; keeps start-up cheap on a 2-core machine
  }
  if (config.model_name == "leap-policy") {
    config.model_name = "leap-test";
  }
  auto server = policy_server::start(std::move(config), make_backend(std::move(scripted)));
  if (!server) {
    ADD_FAILURE() << server.err().message;
    return nullptr;
  }
  return std::move(*server);
}

inline std::unique_ptr<httplib::Client> client_for(
    const policy_server& server,
    std::chrono::milliseconds read_timeout = std::chrono::milliseconds(10000)) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
  client->set_connection_timeout(std::chrono::seconds(5));
  client->set_read_timeout(read_timeout);
  client->set_write_timeout(std::chrono::seconds(5));
  return client;
}

struct http_reply {
  bool ok = false;  // a complete response arrived
  httplib::Error error = httplib::Error::Success;
  int status = 0;
  std::string body;  // what arrived, complete or not
  httplib::Headers headers;

  [[nodiscard]] nlohmann::json json() const { return nlohmann::json::parse(body); }
  [[nodiscard]] std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// POSTs JSON and keeps whatever part of the body arrives, so that a cut stream can be inspected.
inline http_reply post(httplib::Client& client, const std::string& path,
                       const nlohmann::json& body) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  http_reply reply;
  req.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    reply.body.append(data, size);
    return true;
  };
  httplib::Response res;
  reply.ok = client.send(req, res, reply.error);
  reply.status = res.status;
  reply.headers = res.headers;
  return reply;
}

inline http_reply get(httplib::Client& client, const std::string& path) {
  http_reply reply;
  auto res = client.Get(path.c_str());
  reply.ok = static_cast<bool>(res);
  reply.error = res.error();
  if (res) {
    reply.status = res->status;
    reply.body = res->body;
    reply.headers = res->headers;
  }
  return reply;
}

// The data payloads of an SSE body.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  sse_reader reader;
  return reader.feed(body);
}

}  // namespace leap::policy::testing
