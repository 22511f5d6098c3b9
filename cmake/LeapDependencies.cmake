# Every dependency comes from Debian's packages (tools/dev.sh installs them).
# A CUDA-enabled LibTorch is picked instead of Debian's CPU one by pointing CMake at it:
#   cmake -B build -DTorch_DIR=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')/share/cmake/Torch

find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
find_package(CURL REQUIRED)
find_package(RocksDB REQUIRED)
# common/crypto: SHA-256, HMAC and random nonces from libcrypto (Debian's libssl-dev).
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)
# orchestrator/telemetry and the daemon's /metrics: the metric registry and the Prometheus text
# exposition (Debian's prometheus-cpp-dev 1.0.1; only its core library is linked).
find_package(prometheus-cpp CONFIG REQUIRED COMPONENTS core)  # Debian ships no version file
# The tokenizer: Unicode normalization (ICU) and the pre-tokenizers' Unicode regexes (PCRE2).
find_package(ICU REQUIRED COMPONENTS uc)
# Found by path rather than pkg-config, so that a build against a bundle of unpacked .debs
# (tools/dev.sh bundle) needs no pkg-config on the host.
find_path(PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
find_library(PCRE2_LIBRARY pcre2-8 REQUIRED)
add_library(pcre2::pcre2-8 SHARED IMPORTED)
set_target_properties(pcre2::pcre2-8 PROPERTIES
  IMPORTED_LOCATION ${PCRE2_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${PCRE2_INCLUDE_DIR})

# CAF 0.17.6 ships neither a CMake config nor a pkg-config file.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(caf::core SHARED IMPORTED)
set_target_properties(caf::core PROPERTIES
  IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(caf::io SHARED IMPORTED)
set_target_properties(caf::io PROPERTIES
  IMPORTED_LOCATION ${CAF_IO_LIBRARY}
  INTERFACE_LINK_LIBRARIES caf::core)
# TLS between the orchestrator and verifier nodes (Debian's libcaf-openssl0.17, via libcaf-dev).
find_library(CAF_OPENSSL_LIBRARY caf_openssl REQUIRED)
add_library(caf::openssl SHARED IMPORTED)
set_target_properties(caf::openssl PROPERTIES
  IMPORTED_LOCATION ${CAF_OPENSSL_LIBRARY}
  INTERFACE_LINK_LIBRARIES caf::io)

# cpp-httplib: Debian builds it as a shared library and ships no CMake config.
find_path(HTTPLIB_INCLUDE_DIR httplib.h REQUIRED)
find_library(HTTPLIB_LIBRARY cpp-httplib REQUIRED)
add_library(httplib::httplib SHARED IMPORTED)
set_target_properties(httplib::httplib PROPERTIES
  IMPORTED_LOCATION ${HTTPLIB_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${HTTPLIB_INCLUDE_DIR}
  INTERFACE_COMPILE_DEFINITIONS CPPHTTPLIB_OPENSSL_SUPPORT=0
  INTERFACE_LINK_LIBRARIES Threads::Threads)

# LibTorch: only learner/ links it, so its headers stay out of every other translation unit.
find_package(Torch REQUIRED)
# Caffe2's config creates an imported `gflags` target without a location when gflags' own config
# names its targets differently (Debian's does); give it the library so that linking works.
if(TARGET gflags)
  get_target_property(_gflags_location gflags IMPORTED_LOCATION)
  if(NOT _gflags_location)
    find_library(GFLAGS_SHARED_LIBRARY gflags REQUIRED)
    set_target_properties(gflags PROPERTIES IMPORTED_LOCATION ${GFLAGS_SHARED_LIBRARY})
  endif()
endif()

# The CUDA toolkit is optional at build time: the sandbox calls nvcc as a subprocess and only needs
# to know where it is. CMake's CUDAToolkit looks in the standard prefix even when nvcc is not on PATH.
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  set(LEAP_NVCC_DEFAULT "${CUDAToolkit_NVCC_EXECUTABLE}")
  message(STATUS "nvcc: ${LEAP_NVCC_DEFAULT}")
else()
  set(LEAP_NVCC_DEFAULT "nvcc")
  message(STATUS "CUDA toolkit not found: cuda tasks will look for nvcc on PATH at run time")
endif()

if(LEAP_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
