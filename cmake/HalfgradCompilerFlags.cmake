# Warnings, -march=native and sanitizers, applied to halfgrad's own targets through the
# interface target halfgrad_build_flags (never exported: a consumer's flags stay its own).

add_library(halfgrad_build_flags INTERFACE)
target_compile_options(halfgrad_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)

if(HALFGRAD_NATIVE)
  target_compile_options(halfgrad_build_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()

if(HALFGRAD_SANITIZE)
  set(_hg_san "-fsanitize=${HALFGRAD_SANITIZE}")
  target_compile_options(halfgrad_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:${_hg_san} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(halfgrad_build_flags INTERFACE ${_hg_san})
endif()
