// The ipc weight transfer's update_info (learner/weight_ipc.hpp): what the server refuses before
// any CUDA driver call, and the clear error where there is no driver. The transfer itself needs a
// GPU and two processes: tests/e2e/train_loop_test.cpp (SameGpuServerTakesEachStepByIpc).
#include "learner/weight_ipc.hpp"

#include "learner/policy.hpp"
#include "learner/weight_broadcast.hpp"
#include "tests/learner/test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <unistd.h>

namespace leap::learner {
namespace {

using nlohmann::json;

const char* const no_driver = "CUDA IPC needs the NVIDIA driver (libcuda.so.1): ";

// The update_info an exporter of `p` would send, from another process (the parent's pid).
ipc_update_info layout_of(const policy& p) {
  ipc_update_info info;
  std::uint64_t offset = 0;
  for (const auto& t : broadcast_layout(p)) {
    std::uint64_t bytes = t.dtype == "float32" ? 4 : t.dtype == "float64" ? 8 : 2;
    for (auto d : t.shape) {
      bytes *= static_cast<std::uint64_t>(d);
    }
    info.tensors.push_back({t.name, t.dtype, t.shape, offset});
    offset = (offset + bytes + ipc_alignment - 1) / ipc_alignment * ipc_alignment;
  }
  info.buffer_bytes = offset;
  for (std::size_t i = 0; i < info.handle.size(); ++i) {
    info.handle[i] = static_cast<unsigned char>(i * 7);
  }
  info.pid = ::getppid();
  info.device_index = 0;
  return info;
}

policy tiny(std::uint64_t seed) {
  auto p = policy::create_random(testing::tiny_qwen2(), seed);
  EXPECT_TRUE(p.ok()) << p.err().message;
  return std::move(*p);
}

// The parse error of `info` changed by `edit`.
std::string refusal(const std::function<void(json&)>& edit) {
  json info = render_ipc_update_info(layout_of(tiny(1)));
  edit(info);
  auto parsed = parse_ipc_update_info(info);
  EXPECT_FALSE(parsed.ok()) << info.dump();
  return parsed.ok() ? "" : parsed.err().message;
}

TEST(WeightIpc, Base64RoundTripsAndRefusesBadText) {
  const unsigned char bytes[] = {0, 1, 2, 250, 251, 252, 253};
  for (std::size_t n = 0; n <= sizeof bytes; ++n) {
    const auto text = base64_encode(bytes, n);
    EXPECT_EQ(text.size() % 4, 0U);
    auto back = base64_decode(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.err().message;
    EXPECT_EQ(*back, std::vector<unsigned char>(bytes, bytes + n)) << text;
  }
  EXPECT_EQ(base64_encode(reinterpret_cast<const unsigned char*>("leap"), 4), "bGVhcA==");
  EXPECT_FALSE(base64_decode("bGVhcA=").ok());   // length
  EXPECT_FALSE(base64_decode("bGV*cA==").ok());  // alphabet
  EXPECT_FALSE(base64_decode("bG=hcA==").ok());  // padding inside
  EXPECT_FALSE(base64_decode("bGVh====").ok());  // too much padding
}

TEST(WeightIpc, UpdateInfoRoundTrips) {
  const auto info = layout_of(tiny(1));
  auto parsed = parse_ipc_update_info(json::parse(render_ipc_update_info(info).dump()));
  ASSERT_TRUE(parsed.ok()) << parsed.err().message;
  EXPECT_EQ(parsed->tensors, info.tensors);
  EXPECT_EQ(parsed->handle, info.handle);
  EXPECT_EQ(parsed->buffer_bytes, info.buffer_bytes);
  EXPECT_EQ(parsed->pid, info.pid);
  EXPECT_TRUE(check_ipc_update(*parsed, tiny(2)).ok());
}

TEST(WeightIpc, AMalformedUpdateInfoIsRefusedByName) {
  EXPECT_NE(refusal([](json& j) { j["ipc_handle"] = "not base64!"; }).find("'ipc_handle'"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) {
              j["ipc_handle"] = "bGVhcA==";
            }).find("'ipc_handle' holds 4 bytes, a CUipcMemHandle 64"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j.erase("ipc_handle"); }).find("'ipc_handle' must be a string"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["offsets"].erase(0); }).find("of one length"),
            std::string::npos);
  // The last tensor past the buffer's end.
  EXPECT_NE(refusal([](json& j) {
              j["buffer_bytes"] = j["offsets"].back().get<std::uint64_t>();
            }).find("is out of the buffer's"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) {
              j["offsets"][1] = std::uint64_t{1} << 40;
            }).find("is out of the buffer's"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["offsets"][1] = 8; }).find("is not a multiple of 256"),
            std::string::npos);
  // Two tensors at one offset (the second of the first's name is the first non-empty one).
  const std::string overlap = refusal([](json& j) { j["offsets"][2] = j["offsets"][1]; });
  EXPECT_NE(overlap.find("overlap in the buffer"), std::string::npos) << overlap;
  EXPECT_NE(refusal([](json& j) { j["dtype_names"][0] = "int8"; }).find("int8"), std::string::npos);
  EXPECT_NE(refusal([](json& j) {
              j["shapes"][0] = json::array({-1, 2});
            }).find("non-negative integers"),
            std::string::npos);
  EXPECT_NE(refusal([](json& j) { j.erase("pid"); }).find("'pid'"), std::string::npos);
  EXPECT_NE(refusal([](json& j) { j["buffer_bytes"] = 0; }).find("'buffer_bytes'"),
            std::string::npos);
}

TEST(WeightIpc, AnUpdateThatDoesNotFitTheTargetIsRefusedBeforeAnyDriverCall) {
  const auto target = tiny(2);
  auto renamed = layout_of(tiny(1));
  renamed.tensors[0].name = "model.not_there.weight";
  auto shaped = layout_of(tiny(1));
  shaped.tensors[0].shape = {3, 3};
  auto own = layout_of(tiny(1));
  own.pid = ::getpid();
  // The receiver says why (not that the driver is missing): the checks come first.
  ipc_receiver receiver;
  const auto a = receiver.receive(renamed, target);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.err().message.find("has no parameter 'model.not_there.weight'"), std::string::npos)
      << a.err().message;
  const auto b = receiver.receive(shaped, target);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.err().message.find("another shape"), std::string::npos) << b.err().message;
  const auto c = receiver.receive(own, target);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.err().message.find("exported by this process"), std::string::npos) << c.err().message;
  // Nothing was staged.
  auto mutable_target = tiny(2);
  const auto committed = receiver.commit(mutable_target);
  ASSERT_FALSE(committed.ok());
  EXPECT_NE(committed.err().message.find("nothing was received"), std::string::npos);
  // Another model (a restarted server on another checkpoint shape) is caught the same way.
  auto other_config = testing::tiny_qwen2();
  other_config.hidden_size = 64;
  auto other = policy::create_random(other_config, 3);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(check_ipc_update(layout_of(tiny(1)), *other).ok());
}

TEST(WeightIpc, WithoutTheDriverEveryPathSaysWhatIsMissing) {
  if (cuda_ipc_available().ok()) {
    GTEST_SKIP() << "this machine has the NVIDIA driver";
  }
  const auto available = cuda_ipc_available();
  EXPECT_EQ(available.err().message.rfind(no_driver, 0), 0U) << available.err().message;
  // A well-formed update the target accepts: the driver is the next thing it needs.
  ipc_receiver receiver;
  const auto received = receiver.receive(layout_of(tiny(1)), tiny(2));
  ASSERT_FALSE(received.ok());
  EXPECT_NE(received.err().message.find(no_driver), std::string::npos) << received.err().message;
}

TEST(WeightIpc, TheExporterNeedsAModelOnACudaDevice) {
  auto exporter = ipc_exporter::create(tiny(1));
  ASSERT_FALSE(exporter.ok());
  EXPECT_NE(exporter.err().message.find("CUDA IPC needs it on a cuda device"), std::string::npos)
      << exporter.err().message;
}

}  // namespace
}  // namespace leap::learner
