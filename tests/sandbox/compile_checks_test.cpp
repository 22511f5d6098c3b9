// The checks on the compiler's view (sandbox/forbidden.hpp): dependency lists, line markers, the
// front-end dump and object symbols, as the toolchain writes them.
#include "sandbox/forbidden.hpp"
#include "sandbox/harness.hpp"
#include "sandbox/process.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <unistd.h>

namespace leap::sandbox {
namespace {

namespace fs = std::filesystem;

TEST(CompileChecksTest, MakeDependencies) {
  const std::string deps =
      "solution.ii: solution.cpp /usr/include/stdc-predef.h \\\n"
      " /usr/include/c++/12/vector /tmp/a\\ b.h /x/$$HOME \\\n"
      " /etc/passwd\n";
  const std::vector<std::string> expected{"solution.cpp",
                                          "/usr/include/stdc-predef.h",
                                          "/usr/include/c++/12/vector",
                                          "/tmp/a b.h",
                                          "/x/$HOME",
                                          "/etc/passwd"};
  EXPECT_EQ(parse_make_deps(deps), expected);
  // as --MD names its input and temporaries the same way.
  EXPECT_EQ(parse_make_deps("solution.o: solution.ii /tmp/ccdLOtNp.s /etc/hostname\n"),
            (std::vector<std::string>{"solution.ii", "/tmp/ccdLOtNp.s", "/etc/hostname"}));
}

TEST(CompileChecksTest, LineMarkers) {
  const std::string ii =
      "# 0 \"solution.cu\"\n# 0 \"<built-in>\"\n# 0 \"<command-line>\"\n# 1 \"solution.cu\"\n"
      "# 1 \"/etc/pass\\\"wd\" 1\nroot:x:0:0\n#line 7 \"solution.cu\"\n  # 3 \"not/a/marker\"\n"
      "#pragma once\n# 12 \"/usr/include/stdio.h\" 2 3 4\n";
  EXPECT_EQ(parse_line_markers(ii),
            (std::vector<std::string>{"solution.cu", "/etc/pass\"wd", "/usr/include/stdio.h"}));
}

TEST(CompileChecksTest, NvccDryRunIncludeFolders) {
  // nvcc 13's own --dryrun lines, trimmed; the gcc command line below them must not count.
  const std::string dryrun =
      "#$ _HERE_=/opt/cuda-13.0/bin\n"
      "#$ TOP=/opt/cuda-13.0/bin/..\n"
      "#$ INCLUDES=\"-I/opt/cuda-13.0/bin/../targets/x86_64-linux/include\"  \n"
      "#$ SYSTEM_INCLUDES=\"-isystem\" \"/opt/cuda-13.0/bin/../targets/x86_64-linux/include/cccl\" "
      " \n"
      "#$ LIBRARIES=  \"-L/opt/cuda-13.0/bin/../targets/x86_64-linux/lib\"\n"
      "#$ gcc -E -x c++ \"-I/etc\" -include \"cuda_runtime.h\" \"/dev/null\"\n";
  EXPECT_EQ(parse_nvcc_include_dirs(dryrun),
            (std::vector<std::string>{"/opt/cuda-13.0/bin/../targets/x86_64-linux/include",
                                      "/opt/cuda-13.0/bin/../targets/x86_64-linux/include/cccl"}));
  EXPECT_TRUE(parse_nvcc_include_dirs("nvcc fatal   : Unknown option '--dryrun'\n").empty());
}

TEST(CompileChecksTest, ForbiddenLibrariesOfATask) {
  EXPECT_EQ(
      forbidden_libraries({"cublas", "cudnn", "thrust", "cub::", "torch", "std::sort", "qsort"}),
      (std::vector<std::string>{"cublas", "cudnn", "thrust", "cub", "torch", "qsort"}));
}

// NOLINTNEXTLINE(readability-identifier-naming): gtest names the test suite after the fixture.
class IncludedFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        default_scratch_root().parent_path() / ("leap-include-check-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "sys" / "thrust");
    fs::create_directories(root_ / "sys" / "cuda" / "std");
    fs::create_directories(root_ / "other");
    for (const char* f : {"sys/stdio.h", "sys/thrust/sort.h", "sys/cublas_v2.h",
                          "sys/cuda/std/span", "sys/cub.h", "other/secret.txt"}) {
      std::ofstream(root_ / f) << "x\n";
    }
    fs::create_symlink(root_ / "other" / "secret.txt", root_ / "sys" / "innocent.h");
    policy_.candidate_file = "solution.cu";
    policy_.system_dirs = {fs::canonical(root_ / "sys")};
    policy_.refused_libraries = forbidden_libraries({"cublas", "thrust"});
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string path(const std::string& rel) const { return (root_ / rel).string(); }

  fs::path root_;
  include_policy policy_;
};

TEST_F(IncludedFilesTest, SystemHeadersAndTheCandidatePass) {
  EXPECT_FALSE(check_included_files({"solution.cu", path("sys/stdio.h"), path("sys/cuda/std/span"),
                                     path("sys/cub.h")},
                                    policy_)
                   .has_value());
  // ".." that stays inside the folder is the same file.
  EXPECT_FALSE(check_included_files({path("sys/thrust/../stdio.h")}, policy_).has_value());
}

TEST_F(IncludedFilesTest, EverythingElseIsRefusedByName) {
  struct refused {
    std::string file;
    std::string item;
  };
  const std::vector<refused> cases{
      {path("other/secret.txt"), "#include"},         // outside the system folders
      {path("sys/../other/secret.txt"), "#include"},  // climbing out
      {path("sys/innocent.h"), "#include"},  // a link inside a system folder to a file outside
      {"../../etc/passwd", "#include"},      // relative: the build folder or above
      {"./solution.cu", "#include"},         // another spelling of a scratch file
      {"harness.o", "#include"},             // a scratch file
      {"/dev/zero", "#include"},
      {path("sys/thrust/sort.h"), "thrust"},  // a forbidden library's folder
      {path("sys/cublas_v2.h"), "cublas"},    // a forbidden library's header
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    auto hit = check_included_files({"solution.cu", path("sys/stdio.h"), c.file}, policy_);
    ASSERT_TRUE(hit.has_value());
    EXPECT_EQ(hit->item, c.item);
    EXPECT_NE(hit->reason.find("solution.cu includes"), std::string::npos) << hit->reason;
    if (c.item == "#include") {
      EXPECT_NE(hit->reason.find(c.file), std::string::npos) << hit->reason;
    }
  }
}

TEST(CompileChecksTest, AssemblerReadsNoFiles) {
  EXPECT_FALSE(check_assembler_files({"solution.ii", "/tmp/ccdLOtNp.s"}, "solution").has_value());
  EXPECT_FALSE(
      check_assembler_files({"solution.cudafe1.cpp", "/tmp/ccAbCdEf.s"}, "solution").has_value());
  auto hit = check_assembler_files({"solution.ii", "/tmp/ccdLOtNp.s", "/etc/passwd"}, "solution");
  ASSERT_TRUE(hit.has_value());
  EXPECT_NE(hit->reason.find("/etc/passwd"), std::string::npos);
}

TEST(CompileChecksTest, ForbiddenNamesInTheFrontEndDump) {
  const std::vector<std::string> items{"std::sort", "std::stable_sort", "qsort",
                                       "std::priority_queue", "std::make_heap"};
  struct dump_case {
    std::string name;
    std::string dump;
    std::string item;  // empty: clean
  };
  // Lines as g++ 12 writes them with -fdump-tree-original.
  const std::vector<dump_case> cases{
      {"call", "    std::sort<float*> (y, y + (sizetype) ((long unsigned int) n * 4)) >>>>>;\n",
       "std::sort"},
      {"instantiated_for_a_pointer",
       ";; Function void std::sort(_RAIter, _RAIter) [with _RAIter = float*] (null)\n  f = sort;\n",
       "std::sort"},
      {"c_function", "    qsort ((void *) y, (size_t) n, 4, cmp) >>>>>;\n", "qsort"},
      {"container", "  std::priority_queue<float>::push (&h, &x);\n", "std::priority_queue"},
      {"internal_helpers_are_not_the_public_name",
       "  std::__sort<float*, __gnu_cxx::__ops::_Iter_less_iter> (a, b);\n  "
       "std::__make_heap<float*> (a, b);\n"
       "  std::sort_heap_like (a);\n  my_qsort (a);\n",
       ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto hit = find_forbidden_in_dump(c.dump, items);
    if (c.item.empty()) {
      EXPECT_FALSE(hit.has_value()) << hit->reason;
    } else {
      ASSERT_TRUE(hit.has_value());
      EXPECT_EQ(hit->item, c.item);
      EXPECT_NE(hit->reason.find(c.item), std::string::npos);
    }
  }
}

TEST(CompileChecksTest, ObjectSymbols) {
  // nm -P -g of a harness object: it calls solve, operator new, the clock, fwrite; defines main.
  const auto harness = parse_nm(
      "_Z5solvePKiPii U\n_Znwm U\n_ZNSt6chrono3_V212steady_clock3nowEv U\nfwrite U\nmain T 0 10\n"
      "_ZNSt6vectorIiSaIiEE17_M_default_appendEm W 0 20\n");
  struct symbol_case {
    std::string name;
    std::string nm;
    std::vector<std::string> forbidden;
    std::string refused;  // a substring of the reason; empty: accepted
  };
  const std::vector<symbol_case> cases{
      {"an_ordinary_solution",
       "_Z5solvePKiPii T 0 40\n_Z6helperi T 40 8\nscratch_buffer B 0 "
       "4000\nDW.ref.__gxx_personality_v0 V 0 8\n"
       "_ZNSt6vectorIiSaIiEE17_M_default_appendEm W 0 20\n_ZNSt6vectorIfSaIfEE9push_backERKf W 0 "
       "20\n"
       "_ZN2my5stateE B 0 8\nmemcpy U\n_Znwm U\n",
       {},
       ""},
      {"cuda_object",
       "_Z27__device_stub__Z4addkPKfPfiPKfPfi T 20 10\n_Z4addkPKfPfi T 140 10\n_Z5solvePKfPfi T "
       "150 10\n"
       "__cudaRegisterFatBinary U\n",
       {"cublas", "thrust", "cub::"},
       ""},
      {"clock_gettime", "clock_gettime T 0 10\n", {}, "defines clock_gettime with C linkage"},
      {"weak_write", "write W 0 10\n", {}, "defines write"},
      {"cuda_timer", "cudaEventElapsedTime T 0 10\n", {}, "cudaEventElapsedTime"},
      {"main", "main T 0 10\n", {}, "do not define main()"},
      {"std_clock_used_by_the_harness",
       "_ZNSt6chrono3_V212steady_clock3nowEv W 0 10\n",
       {},
       "which the harness uses"},
      {"global_operator_new", "_Znwm T 0 10\n", {}, "which the harness uses"},
      {"strong_std_definition",
       "_ZNSt6vectorIfSaIfEE9push_backERKf T 0 20\n",
       {},
       "standard library"},
      // What GCC 13's <thread> emits into every object that starts a std::thread.
      {"weak_inline_std_member", "_ZNSt6thread24_M_thread_deps_never_runEv W 0 10\n", {}, ""},
      {"strong_over_a_harness_weak",
       "_ZNSt6vectorIiSaIiEE17_M_default_appendEm T 0 20\n",
       {},
       "harness"},
      {"c_library_object", "stdout D 0 8\n", {}, "defines stdout"},
      {"forbidden_library_call",
       "_Z5solvePKfPfi T 0 10\ncublasSgemm_v2 U\n",
       {"cublas"},
       "calls cublasSgemm_v2"},
      {"library_loading_when_something_is_forbidden", "dlsym U\n", {"cublas"}, "dlsym"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto hit = check_object_symbols(parse_nm(c.nm), harness, c.forbidden, "solution.cpp");
    if (c.refused.empty()) {
      EXPECT_FALSE(hit.has_value()) << hit->reason;
    } else {
      ASSERT_TRUE(hit.has_value());
      EXPECT_NE(hit->reason.find(c.refused), std::string::npos) << hit->reason;
      EXPECT_EQ(hit->reason.rfind("solution.cpp ", 0), 0U) << hit->reason;
    }
  }
  // Without a forbidden list, dlopen is the candidate's business.
  EXPECT_FALSE(
      check_object_symbols(parse_nm("dlopen U\n"), harness, {}, "solution.cpp").has_value());
}

TEST(CompileChecksTest, ElfSymbolsAsNmListsThem) {
  // A real object from the real g++: the in-process reader must see what nm -g sees.
  const fs::path dir =
      default_scratch_root().parent_path() / ("leap-elf-check-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "o.cpp")
      << "#include <vector>\n"
         "extern \"C\" int clock_gettime(int, void*) { return 0; }\n"
         "int counter;\n"
         "int fake() asm(\"gettimeofday\");\n"
         "int fake() { return counter; }\n"
         "__attribute__((weak)) int maybe() { return 1; }\n"
         "static int hidden() { return 2; }\n"
         "asm(\".globl raw_label\\nraw_label:\\n\");\n"
         "int use_vector(int n) { std::vector<int> v(n); return v.size() + hidden(); }\n"
         "extern int elsewhere(); int call() { return elsewhere(); }\n";
  const std::string cmd = "cd '" + dir.string() + "' && g++ -std=c++17 -O2 -c o.cpp -o o.o";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(dir / "o.o", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove_all(dir);
  auto symbols = parse_elf_symbols(bytes);
  ASSERT_TRUE(symbols.ok()) << symbols.err().message;
  std::map<std::string, char> got;
  for (const auto& s : *symbols) {
    got[s.name] = s.type;
  }
  EXPECT_EQ(got["clock_gettime"], 'T');
  EXPECT_EQ(got["gettimeofday"], 'T');
  EXPECT_EQ(got["counter"], 'D');
  EXPECT_EQ(got["_Z5maybev"], 'W');
  EXPECT_EQ(got["raw_label"], 'T');  // no type: counted as a function
  EXPECT_EQ(got["_Z9elsewherev"], 'U');
  EXPECT_EQ(got["_Z10use_vectori"], 'T');
  EXPECT_EQ(got.count("_ZL6hiddenv"), 0U);  // local
  EXPECT_FALSE(parse_elf_symbols("not an object").ok());
  EXPECT_FALSE(parse_elf_symbols(bytes.substr(0, 100)).ok());
}

// A kind whose candidates another language's compiler builds (C, Rust) exports an unmangled
// solve(); its row's `entry_linkage::c` makes the C++ stub declare it so. Real gcc and g++: the
// stub links with a C object only when it declares the linkage the object has.
TEST(HarnessLinkage, TheStubLinksWithAnEntryPointOfTheRowsLinkage) {
  task t;
  t.id = "c/doubling";
  t.args = {{"x", value_type::f32, arg_role::input, "n", -1.0, 1.0, 0},
            {"y", value_type::f32, arg_role::output, "n", -1.0, 1.0, 0},
            {"n", value_type::i32, arg_role::scalar, "", 0, 0, 64}};
  const fs::path dir =
      default_scratch_root().parent_path() / ("leap-linkage-check-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "solve.c") << "void solve(const float* x, float* y, int n) {\n"
                                    "  for (int i = 0; i < n; ++i) y[i] = 2.0f * x[i];\n"
                                    "}\n";
  const std::string in_dir = "cd '" + dir.string() + "' && ";
  ASSERT_EQ(std::system((in_dir + "gcc -std=c11 -O2 -c -x c solve.c -o solve.o").c_str()), 0);
  auto links = [&](entry_linkage linkage, const std::string& name) {
    std::ofstream(dir / (name + ".cpp"))
        << harness_source(t, harness_flavour::host_candidate, linkage);
    const std::string build = in_dir + "g++ -std=c++17 -O2 -c " + name + ".cpp -o " + name +
                              ".o && g++ " + name + ".o solve.o -o " + name + " 2>" + name + ".log";
    return std::system(build.c_str()) == 0;
  };
  EXPECT_TRUE(links(entry_linkage::c, "c_stub"));
  EXPECT_TRUE(fs::exists(dir / "c_stub"));
  EXPECT_FALSE(links(entry_linkage::cpp, "cpp_stub"));
  std::ifstream log(dir / "cpp_stub.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("undefined reference to `solve(float const*, float*, int)'"),
            std::string::npos)
      << text;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace leap::sandbox
