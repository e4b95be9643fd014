# Finds halfgrad's dependencies (all Debian packages; ./scripts/setup installs them) and
# decides the AUTO options. Sets HALFGRAD_HAS_CUDA and HALFGRAD_HAS_ONEDNN.

find_package(fmt 9 REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
# zlib (zlib1g-dev) inflates and deflates the entries of ZIP archives (io/zip.h: numpy's .npz)
# and reads gzipped IDX files (io/idx.h, the MNIST files of data/mnist.h).
find_package(ZLIB REQUIRED)

# xxHash (libxxhash-dev) computes the checksums of the safetensors files halfgrad writes
# (NOTE [Safetensors checksums]); Debian ships no CMake package for it, so the header and the
# library are located directly.
find_path(HALFGRAD_XXHASH_INCLUDE_DIR xxhash.h)
find_library(HALFGRAD_XXHASH_LIBRARY NAMES xxhash)
if(NOT HALFGRAD_XXHASH_INCLUDE_DIR OR NOT HALFGRAD_XXHASH_LIBRARY)
  message(FATAL_ERROR "xxHash was not found (xxhash.h, libxxhash); install libxxhash-dev "
                      "(./scripts/setup does)")
endif()
add_library(halfgrad_xxhash INTERFACE)
target_include_directories(halfgrad_xxhash INTERFACE "${HALFGRAD_XXHASH_INCLUDE_DIR}")
target_link_libraries(halfgrad_xxhash INTERFACE "${HALFGRAD_XXHASH_LIBRARY}")

# SLEEF (libsleef-dev) runs the vector math of the CPU elementwise kernels (NOTE [Vector
# math] in cpu/vector_math.h); like xxHash it has no CMake package in Debian. x86-64 only: its
# AVX-512 and AVX2 functions are the ones halfgrad calls.
set(HALFGRAD_HAS_SLEEF OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  find_path(HALFGRAD_SLEEF_INCLUDE_DIR sleef.h)
  find_library(HALFGRAD_SLEEF_LIBRARY NAMES sleef)
  if(NOT HALFGRAD_SLEEF_INCLUDE_DIR OR NOT HALFGRAD_SLEEF_LIBRARY)
    message(FATAL_ERROR "SLEEF was not found (sleef.h, libsleef); install libsleef-dev "
                        "(./scripts/setup does)")
  endif()
  set(HALFGRAD_HAS_SLEEF ON)
  add_library(halfgrad_sleef INTERFACE)
  target_include_directories(halfgrad_sleef INTERFACE "${HALFGRAD_SLEEF_INCLUDE_DIR}")
  target_link_libraries(halfgrad_sleef INTERFACE "${HALFGRAD_SLEEF_LIBRARY}")
endif()

# ---- oneDNN -------------------------------------------------------------------------------
# NOTE [Finding oneDNN] Debian's dnnl-config.cmake insists on OpenCL (its package is built
# with the OpenCL GPU runtime, which halfgrad does not use), so the library and header are
# located directly and wrapped in an imported target of our own.
set(HALFGRAD_HAS_ONEDNN OFF)
if(NOT HALFGRAD_ONEDNN STREQUAL "OFF")
  find_path(HALFGRAD_DNNL_INCLUDE_DIR dnnl.hpp)
  find_library(HALFGRAD_DNNL_LIBRARY NAMES dnnl)
  if(HALFGRAD_DNNL_INCLUDE_DIR AND HALFGRAD_DNNL_LIBRARY)
    set(HALFGRAD_HAS_ONEDNN ON)
    add_library(halfgrad_dnnl INTERFACE)
    target_include_directories(halfgrad_dnnl INTERFACE "${HALFGRAD_DNNL_INCLUDE_DIR}")
    target_link_libraries(halfgrad_dnnl INTERFACE "${HALFGRAD_DNNL_LIBRARY}")
  elseif(HALFGRAD_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "HALFGRAD_ONEDNN=ON but oneDNN was not found (dnnl.hpp, libdnnl); "
                        "install libdnnl-dev or use HALFGRAD_ONEDNN=AUTO|OFF")
  endif()
endif()

# ---- CUDA ---------------------------------------------------------------------------------
set(HALFGRAD_HAS_CUDA OFF)
if(NOT HALFGRAD_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper first (the benchmark machines), Ampere as well.
      set(CMAKE_CUDA_ARCHITECTURES 90 80)
    endif()
    enable_language(CUDA)
    # NOTE [CUDA dialect] CMake 3.25 predates nvcc's C++20 support in its compiler tables
    # (a C++20 target with .cu files fails at generate time); tell it the flag.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(HALFGRAD_HAS_CUDA ON)
  elseif(HALFGRAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HALFGRAD_CUDA=ON but no CUDA compiler (nvcc) was found; "
                        "install the CUDA toolkit or use HALFGRAD_CUDA=AUTO|OFF")
  endif()
endif()
