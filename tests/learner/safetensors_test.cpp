#include "learner/safetensors.hpp"

#include "learner/detail/checkpoint_view.hpp"
#include "tests/learner/test_support.hpp"
#include "tests/storage/small_disk.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace leap::learner {
namespace {

using testing::scratch_dir;

host_tensor bytes_tensor(dtype type, std::vector<std::int64_t> shape, std::uint64_t seed) {
  host_tensor t;
  t.type = type;
  t.shape = std::move(shape);
  t.data.resize(static_cast<std::size_t>(t.numel()) * dtype_size(type));
  std::mt19937_64 engine(seed);
  for (auto& b : t.data) {
    b = static_cast<std::uint8_t>(engine());
  }
  return t;
}

TEST(Safetensors, RoundTripIsBitExactForEveryDtype) {
  scratch_dir dir;
  tensor_map tensors;
  std::uint64_t seed = 1;
  for (auto type : {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i64, dtype::i32,
                    dtype::i16, dtype::i8, dtype::u8, dtype::boolean}) {
    tensors.emplace("t." + to_string(type), bytes_tensor(type, {3, 5}, seed++));
  }
  tensors.emplace("scalar", bytes_tensor(dtype::f32, {}, seed++));
  tensors.emplace("empty", bytes_tensor(dtype::f32, {0, 4}, seed++));
  const auto path = dir.sub("a.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).ok());
  std::map<std::string, std::string> metadata;
  auto back = read_safetensors(path, &metadata);
  ASSERT_TRUE(back.ok()) << back.err().message;
  ASSERT_EQ(back->size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const auto& b = back->at(name);
    EXPECT_EQ(b.type, t.type) << name;
    EXPECT_EQ(b.shape, t.shape) << name;
    EXPECT_EQ(b.data, t.data) << name;
  }
  EXPECT_EQ(metadata.at("format"), "pt");
}

TEST(Safetensors, FileLayoutFollowsTheFormat) {
  scratch_dir dir;
  tensor_map tensors;
  tensors.emplace("b", make_float_tensor(dtype::f32, {2}, {1.0, 2.0}));
  tensors.emplace("a", make_float_tensor(dtype::bf16, {1}, {1.0}));
  const auto path = dir.sub("x.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  std::ifstream in(path, std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ((8 + n) % 8, 0U) << "data section is 8-byte aligned";
  // Names in sorted order, offsets relative to the data section.
  EXPECT_THAT(header,
              ::testing::HasSubstr(R"("a":{"data_offsets":[0,2],"dtype":"BF16","shape":[1]})"));
  EXPECT_THAT(header,
              ::testing::HasSubstr(R"("b":{"data_offsets":[2,10],"dtype":"F32","shape":[2]})"));
  EXPECT_EQ(std::filesystem::file_size(path), 8 + n + 10);
}

// A checkpoint file on a full disk (a real 1 MiB tmpfs in a private mount namespace: root only,
// else skipped): the error names the file, the reason and the free space; the old file is whole
// and no temporary is left on the disk.
TEST(Safetensors, AFullDiskKeepsTheOldFileAndTheErrorSaysTheFreeSpace) {
  scratch_dir dir;
  leap::test::small_disk disk(dir.path(), 1U << 20U);
  if (!disk.skip_reason().empty()) {
    GTEST_SKIP() << disk.skip_reason();
  }
  const std::string path = (disk / "model.safetensors").string();
  tensor_map old_tensors;
  old_tensors.emplace("w", bytes_tensor(dtype::f32, {4, 4}, 7));
  ASSERT_TRUE(write_safetensors(path, old_tensors).ok());
  disk.fill();
  tensor_map big;
  big.emplace("w", bytes_tensor(dtype::f32, {256, 512}, 8));  // 512 KiB
  const auto s = write_safetensors(path, big);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, ::testing::HasSubstr(path + ": cannot write: No space left"));
  EXPECT_THAT(s.err().message, ::testing::HasSubstr("free of 1 MiB on its filesystem"));
  auto back = read_safetensors(path);
  ASSERT_TRUE(back.ok()) << back.err().message;
  EXPECT_EQ(back->at("w").data, old_tensors.at("w").data);
  for (const auto& entry : std::filesystem::directory_iterator(disk / "")) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "model.safetensors" || name.rfind("filler-", 0) == 0) << name;
  }
}

// Writes a file with a hand-made header and `data_bytes` zero bytes of data.
std::string raw_file(const scratch_dir& dir, const std::string& header, std::size_t data_bytes,
                     std::uint64_t claimed_length = 0) {
  auto path = dir.sub("raw.safetensors");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t n = claimed_length != 0 ? claimed_length : header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const std::string zeros(data_bytes, '\0');
  out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  return path;
}

TEST(Safetensors, CorruptFilesGiveErrorsNamingTheProblem) {
  struct test_case {
    std::string header;
    std::size_t data_bytes;
    std::uint64_t claimed_length;
    std::string expected;
  };
  const std::vector<test_case> cases = {
      {"{", 0, 0, "not valid JSON"},
      {"[1,2]", 0, 0, "not a JSON object"},
      {R"({"w":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1, 0,
       "unsupported safetensors dtype 'F8'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8, 0,
       "does not match shape and dtype"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, 0,
       "beyond the data section"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", 8, 0,
       "expected an object with 'dtype', 'shape' and 'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, 0, "negative dimension"},
      {"{}", 0, 1000, "exceeds the file size"},
      // 2^62 x 4 floats: 2^66 bytes, 0 once wrapped to 64 bits.
      {R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0, 0,
       "shape holds more than 2^64 bytes"},
  };
  for (const auto& c : cases) {
    scratch_dir dir;
    auto r = read_safetensors(raw_file(dir, c.header, c.data_bytes, c.claimed_length));
    ASSERT_FALSE(r.ok()) << c.header;
    EXPECT_THAT(r.err().message, ::testing::HasSubstr(c.expected)) << c.header;
    EXPECT_THAT(r.err().message, ::testing::HasSubstr("raw.safetensors"))
        << "the error names the file";
  }
}

TEST(Safetensors, MissingAndTruncatedFiles) {
  scratch_dir dir;
  auto missing = read_safetensors(dir.sub("nope.safetensors"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.err().message, ::testing::HasSubstr("cannot open"));
  std::ofstream(dir.sub("short.safetensors")) << "abc";
  auto truncated = read_safetensors(dir.sub("short.safetensors"));
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.err().message, ::testing::HasSubstr("truncated"));
}

// A valid file cut short anywhere (inside the length, the header, a tensor, or by its last byte) is
// an error naming the file, the tensor and the sizes; the reader maps the file, so a byte range it
// trusted past the end would be a SIGBUS rather than an error.
TEST(Safetensors, FileCutShortAnywhereIsAnErrorNotACrash) {
  scratch_dir dir;
  tensor_map tensors;
  tensors.emplace("a", bytes_tensor(dtype::f32, {64, 64}, 1));  // 16 KiB: several pages
  tensors.emplace("b", bytes_tensor(dtype::bf16, {3000}, 2));
  const auto original = dir.sub("full.safetensors");
  ASSERT_TRUE(write_safetensors(original, tensors).ok());
  const auto size = std::filesystem::file_size(original);
  std::uint64_t header = 0;
  {
    std::ifstream in(original, std::ios::binary);
    in.read(reinterpret_cast<char*>(&header), 8);
  }
  const std::uint64_t data_begin = 8 + header;
  ASSERT_EQ(size, data_begin + 16384 + 6000);
  struct test_case {
    std::uint64_t keep;
    std::vector<std::string> expected;
  };
  const std::vector<test_case> cases = {
      {4, {"truncated file (no 8-byte header length)"}},
      {8 + header / 2, {"header length " + std::to_string(header), "exceeds the file size"}},
      {data_begin, {"tensor 'a'", "ends at 16384", "(0 bytes)", "truncated"}},
      {data_begin + 16384 / 2, {"tensor 'a'", "ends at 16384", "(8192 bytes)"}},
      {data_begin + 16384 + 100, {"tensor 'b'", "ends at 22384", "(16484 bytes)"}},
      {size - 1, {"tensor 'b'", "ends at 22384", "(22383 bytes)"}},
  };
  for (const auto& c : cases) {
    const auto path = dir.sub("cut-" + std::to_string(c.keep) + ".safetensors");
    std::filesystem::copy_file(original, path);
    std::filesystem::resize_file(path, c.keep);
    auto r = read_safetensors(path);
    ASSERT_FALSE(r.ok()) << "cut at " << c.keep;
    EXPECT_THAT(r.err().message, ::testing::HasSubstr(path)) << "the error names the file";
    for (const auto& e : c.expected) {
      EXPECT_THAT(r.err().message, ::testing::HasSubstr(e)) << "cut at " << c.keep;
    }
  }
}

// A file that shrinks after it was opened (a writer truncating it in place: the project's writers
// rename, others may not) is an error when its tensors are read into host memory, not a SIGBUS from
// the mapping: read_safetensors() is this open plus this copy.
TEST(Safetensors, FileShrinkingAfterItWasOpenedIsAnErrorNotACrash) {
  scratch_dir dir;
  tensor_map tensors;
  tensors.emplace("a", bytes_tensor(dtype::f32, {64, 64}, 1));
  tensors.emplace("b", bytes_tensor(dtype::f32, {4096}, 2));
  const auto path = dir.sub("shrinks.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  auto mapped = detail::mapped_checkpoint::open_file(path);
  ASSERT_TRUE(mapped.ok()) << mapped.err().message;
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 16384 / 2);  // half of 'b' is gone
  auto copied = mapped->copy();
  ASSERT_FALSE(copied.ok());
  EXPECT_THAT(copied.err().message, ::testing::HasSubstr(path));
  EXPECT_THAT(copied.err().message, ::testing::HasSubstr("tensor 'b'"));
  EXPECT_THAT(copied.err().message,
              ::testing::HasSubstr("now " + std::to_string(size - 8192) + " bytes"));
}

TEST(Safetensors, WriterRejectsATensorWhoseBytesDisagreeWithItsShape) {
  scratch_dir dir;
  tensor_map tensors;
  auto t = make_float_tensor(dtype::f32, {3}, {1, 2, 3});
  t.shape = {4};
  tensors.emplace("w", t);
  auto s = write_safetensors(dir.sub("w.safetensors"), tensors);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.err().message, ::testing::HasSubstr("tensor 'w' holds 12 bytes"));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("w.safetensors")));
}

TEST(Safetensors, ShardedFolderRoundTripsAndReplacesTheOtherLayout) {
  scratch_dir dir;
  tensor_map tensors;
  for (int i = 0; i < 5; ++i) {
    tensors.emplace("layer." + std::to_string(i),
                    bytes_tensor(dtype::f32, {10, 10}, 100 + i));  // 400 bytes
  }
  ASSERT_TRUE(write_safetensors_dir(dir.path(), tensors).ok());
  EXPECT_TRUE(std::filesystem::exists(dir.sub("model.safetensors")));

  // 1000-byte shards hold two tensors each: three shards, and the single file is gone.
  ASSERT_TRUE(write_safetensors_dir(dir.path(), tensors, "model", 1000).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.sub("model.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(dir.sub("model-00001-of-00003.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(dir.sub("model-00003-of-00003.safetensors")));
  std::ifstream index(dir.sub("model.safetensors.index.json"));
  std::stringstream text;
  text << index.rdbuf();
  EXPECT_THAT(text.str(), ::testing::HasSubstr(R"("total_size": 2000)"));
  EXPECT_THAT(text.str(), ::testing::HasSubstr(R"("layer.4": "model-00003-of-00003.safetensors")"));

  auto back = read_safetensors_dir(dir.path());
  ASSERT_TRUE(back.ok()) << back.err().message;
  ASSERT_EQ(back->size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(back->at(name).data, t.data) << name;
  }

  // And back to a single file: the index and shards are removed.
  ASSERT_TRUE(write_safetensors_dir(dir.path(), tensors).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.sub("model.safetensors.index.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.sub("model-00001-of-00003.safetensors")));
}

TEST(Safetensors, IndexErrors) {
  scratch_dir dir;
  auto none = read_safetensors_dir(dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.err().message,
              ::testing::HasSubstr("neither model.safetensors nor model.safetensors.index.json"));

  std::ofstream(dir.sub("model.safetensors.index.json"))
      << R"({"weight_map": {"w": "shard.safetensors"}})";
  auto missing_shard = read_safetensors_dir(dir.path());
  ASSERT_FALSE(missing_shard.ok());
  EXPECT_THAT(missing_shard.err().message, ::testing::HasSubstr("shard.safetensors"));

  tensor_map other;
  other.emplace("v", make_float_tensor(dtype::f32, {1}, {1.0}));
  ASSERT_TRUE(write_safetensors(dir.sub("shard.safetensors"), other).ok());
  auto absent = read_safetensors_dir(dir.path());
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.err().message,
              ::testing::HasSubstr("tensor 'w' is listed in shard 'shard.safetensors' but absent"));
}

TEST(Safetensors, HalfPrecisionConversionsRoundToNearestEven) {
  struct test_case {
    float value;
    std::uint16_t bf16;
    std::uint16_t f16;
  };
  const std::vector<test_case> cases = {
      {0.0F, 0x0000, 0x0000},
      {-0.0F, 0x8000, 0x8000},
      {1.0F, 0x3F80, 0x3C00},
      {-2.0F, 0xC000, 0xC000},
      {0.1F, 0x3DCD, 0x2E66},
      {65504.0F, 0x4780, 0x7BFF},           // largest half
      {65520.0F, 0x4780, 0x7C00},           // rounds to half infinity
      {5.9604645e-08F, 0x3380, 0x0001},     // smallest half subnormal
      {1.0F + 0x1.0p-8F, 0x3F80, 0x3C04},   // bf16 tie goes to even (down)
      {1.0F + 0x1.8p-8F, 0x3F81, 0x3C06},   // bf16 above the tie goes up
      {1.0F + 0x1.0p-11F, 0x3F80, 0x3C00},  // half tie goes to even (down)
  };
  for (const auto& c : cases) {
    EXPECT_EQ(float_to_bf16(c.value), c.bf16) << c.value;
    EXPECT_EQ(float_to_f16(c.value), c.f16) << c.value;
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::nanf("")))));
  // Every half and bfloat16 value converts to float and back unchanged.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    if (!std::isnan(f16_to_float(x))) {
      ASSERT_EQ(float_to_f16(f16_to_float(x)), x) << h;
    }
    if (!std::isnan(bf16_to_float(x))) {
      ASSERT_EQ(float_to_bf16(bf16_to_float(x)), x) << h;
    }
  }
}

TEST(Safetensors, DtypeNames) {
  for (auto type : {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i64, dtype::i32,
                    dtype::i16, dtype::i8, dtype::u8, dtype::boolean}) {
    auto back = parse_dtype(to_string(type));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, type);
  }
  EXPECT_FALSE(parse_dtype("F8_E4M3").ok());
  EXPECT_EQ(*parse_torch_dtype("bfloat16"), dtype::bf16);
  EXPECT_THAT(parse_torch_dtype("int8").err().message,
              ::testing::HasSubstr("unsupported dtype 'int8'"));
}

}  // namespace
}  // namespace leap::learner
