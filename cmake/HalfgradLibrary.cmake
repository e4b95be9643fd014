# The halfgrad library: one static target, halfgrad::halfgrad, built from the module folders at
# the top of the repository (core/, cpu/, cuda/, autograd/, ops/, nn/, optim/, amp/,
# io/, data/, profiler/; docs/design.md §1 has their layer order). distributed/ builds a second
# library, halfgrad::distributed, when MPI is found (distributed/CMakeLists.txt).

include(GNUInstallDirs)

set(HALFGRAD_MODULES core kernel cpu autograd ops nn optim amp io data profiler)

# NOTE [Include root] Every include names its module, "halfgrad/core/tensor.h", in this tree as
# in an installed prefix. The modules sit at the top of the repository, so the build tree gets
# an include folder of its own, build/include/halfgrad/, whose entries are links to the module
# folders (and to halfgrad.h), beside the generated config.h; the install rules
# (HalfgradInstall.cmake) copy each module's headers to include/halfgrad/<module>/. The
# repository's own include/halfgrad/ holds the same links, checked in (scripts/check-layers
# keeps them), for editors and tools that read the tree without a build; the build does not
# use them, so a copy of the tree that drops links still builds.
set(HALFGRAD_INCLUDE_ROOT "${PROJECT_BINARY_DIR}/include")
file(MAKE_DIRECTORY "${HALFGRAD_INCLUDE_ROOT}/halfgrad")
foreach(_hg_entry IN LISTS HALFGRAD_MODULES ITEMS cuda distributed halfgrad.h)
  file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${_hg_entry}" "${HALFGRAD_INCLUDE_ROOT}/halfgrad/${_hg_entry}"
       SYMBOLIC)
endforeach()
configure_file("${PROJECT_SOURCE_DIR}/cmake/config.h.in" "${HALFGRAD_INCLUDE_ROOT}/halfgrad/config.h"
               @ONLY)

set(_hg_source_globs "")
foreach(_hg_module IN LISTS HALFGRAD_MODULES)
  list(APPEND _hg_source_globs "${PROJECT_SOURCE_DIR}/${_hg_module}/*.cpp")
endforeach()
file(GLOB HALFGRAD_SOURCES CONFIGURE_DEPENDS ${_hg_source_globs})

# The vector math files for one instruction set each (NOTE [Vector math]): compiled for it,
# called only where the CPU has it; without SLEEF (not x86-64) they are left out.
set(_hg_vector_math_avx512 "${PROJECT_SOURCE_DIR}/cpu/vector_math_avx512.cpp")
set(_hg_vector_math_avx2 "${PROJECT_SOURCE_DIR}/cpu/vector_math_avx2.cpp")
# The per-head bfloat16 attention (NOTE [Attention by heads]) takes its exponentials from SLEEF.
set(_hg_attention_heads "${PROJECT_SOURCE_DIR}/cpu/attention_heads_avx512.cpp")
if(NOT HALFGRAD_HAS_SLEEF)
  list(REMOVE_ITEM HALFGRAD_SOURCES ${_hg_vector_math_avx512} ${_hg_vector_math_avx2}
    ${_hg_attention_heads})
endif()

add_library(halfgrad STATIC ${HALFGRAD_SOURCES})
add_library(halfgrad::halfgrad ALIAS halfgrad)
set_target_properties(halfgrad PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(halfgrad PUBLIC
  $<BUILD_INTERFACE:${HALFGRAD_INCLUDE_ROOT}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(halfgrad PUBLIC cxx_std_20)
target_link_libraries(halfgrad
  PUBLIC fmt::fmt Threads::Threads OpenMP::OpenMP_CXX
  PRIVATE $<BUILD_INTERFACE:halfgrad_library_flags>)

# Eigen (header-only) runs the float64 GEMM, and float32 where oneDNN is absent; only the
# library's own sources see it, so an installed consumer needs no Eigen.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
target_link_libraries(halfgrad PRIVATE $<BUILD_INTERFACE:Eigen3::Eigen>)

# nlohmann-json (header-only) reads and writes the safetensors headers in io/; no public
# header includes it.
find_package(nlohmann_json 3.10 REQUIRED)
target_link_libraries(halfgrad PRIVATE $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>)

# xxHash checksums the safetensors files in io/ (NOTE [Safetensors checksums]); no public header
# includes it, and an installed consumer links libxxhash as it links libdnnl.
target_link_libraries(halfgrad PRIVATE $<BUILD_INTERFACE:halfgrad_xxhash>)
target_link_libraries(halfgrad INTERFACE $<INSTALL_INTERFACE:${HALFGRAD_XXHASH_LIBRARY}>)

# zlib inflates and deflates ZIP entries (io/zip.cpp) and reads gzipped IDX files (io/idx.cpp);
# no public header includes it. ZLIB::ZLIB is a link-only dependency of the static library, so
# halfgradConfig.cmake finds ZLIB for an installed consumer.
target_link_libraries(halfgrad PRIVATE ZLIB::ZLIB)

# The multi_tensor kernels' AVX-512 passes (NOTE [Vectorized optimizer passes]): compiled for
# AVX-512 and called only where the CPU has it (the file is empty off x86-64). -ffp-contract=off:
# the passes give the scalar loops' bits, which fuse no multiply into an add.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
  set_source_files_properties("${PROJECT_SOURCE_DIR}/cpu/multi_tensor_avx512.cpp" PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-ffp-contract=off")
endif()

if(HALFGRAD_HAS_SLEEF)
  # -ffp-contract=off: the formulas round each operation as unary.def's scalar ones do (a
  # fused multiply-add would change their arguments by an ulp, and exp amplifies that).
  set_source_files_properties(${_hg_vector_math_avx512} PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-ffp-contract=off")
  set_source_files_properties(${_hg_vector_math_avx2} PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-ffp-contract=off")
  set_source_files_properties(${_hg_attention_heads} PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512bf16")
  target_link_libraries(halfgrad PRIVATE $<BUILD_INTERFACE:halfgrad_sleef>)
  target_link_libraries(halfgrad INTERFACE $<INSTALL_INTERFACE:${HALFGRAD_SLEEF_LIBRARY}>)
endif()

if(HALFGRAD_HAS_ONEDNN)
  target_link_libraries(halfgrad PRIVATE $<BUILD_INTERFACE:halfgrad_dnnl>)
  # A static library carries its link dependencies; an installed consumer links libdnnl too.
  target_link_libraries(halfgrad INTERFACE $<INSTALL_INTERFACE:${HALFGRAD_DNNL_LIBRARY}>)
endif()

add_subdirectory(cuda)
# hg::distributed, a library of its own on top of halfgrad, built when MPI is found.
add_subdirectory(distributed)
