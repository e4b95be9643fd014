# Installs the library, its headers and a CMake package, so that a user's project does
#   find_package(halfgrad REQUIRED)                          # or COMPONENTS cuda distributed
#   target_link_libraries(app PRIVATE halfgrad::halfgrad)    # halfgrad::distributed
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HALFGRAD_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/halfgrad")

install(TARGETS halfgrad EXPORT halfgradTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Each module's headers (and the op list) to include/halfgrad/<module>/, the umbrella header and
# the generated config.h beside them: the layout of the build tree's include folder (NOTE
# [Include root] in HalfgradLibrary.cmake).
foreach(_hg_module IN LISTS HALFGRAD_MODULES ITEMS cuda)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${_hg_module}/"
    DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/halfgrad/${_hg_module}"
    FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
endforeach()
install(FILES "${PROJECT_SOURCE_DIR}/halfgrad.h" "${HALFGRAD_INCLUDE_ROOT}/halfgrad/config.h"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/halfgrad")
# hg::distributed, where MPI was found: its library (halfgrad::distributed) and headers, in an
# export set of its own, which the package loads only for find_package(halfgrad COMPONENTS
# distributed): a consumer that does not ask for it needs no MPI.
if(TARGET halfgrad_distributed)
  set_target_properties(halfgrad_distributed PROPERTIES EXPORT_NAME distributed)
  install(TARGETS halfgrad_distributed EXPORT halfgradDistributedTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/distributed/"
    DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/halfgrad/distributed" FILES_MATCHING PATTERN "*.h")
endif()
if(HALFGRAD_BUILD_TOOLS)
  install(TARGETS hg-info hg-ops RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT halfgradTargets NAMESPACE halfgrad:: DESTINATION "${HALFGRAD_INSTALL_CMAKEDIR}")
if(TARGET halfgrad_distributed)
  install(EXPORT halfgradDistributedTargets NAMESPACE halfgrad::
    DESTINATION "${HALFGRAD_INSTALL_CMAKEDIR}")
endif()
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/halfgradConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/halfgradConfig.cmake" INSTALL_DESTINATION "${HALFGRAD_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/halfgradConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/halfgradConfig.cmake"
  "${PROJECT_BINARY_DIR}/halfgradConfigVersion.cmake" DESTINATION "${HALFGRAD_INSTALL_CMAKEDIR}")
