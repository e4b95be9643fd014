# Installs the library, its headers and a CMake package, so that a user's project does
#   find_package(halfgrad REQUIRED)
#   target_link_libraries(app PRIVATE halfgrad::halfgrad)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HALFGRAD_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/halfgrad")

install(TARGETS halfgrad EXPORT halfgradTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY "${PROJECT_SOURCE_DIR}/halfgrad/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/halfgrad"
  FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
install(FILES "${PROJECT_BINARY_DIR}/include/halfgrad/config.h"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/halfgrad")
if(HALFGRAD_BUILD_TOOLS)
  install(TARGETS hg-info hg-ops RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT halfgradTargets NAMESPACE halfgrad:: DESTINATION "${HALFGRAD_INSTALL_CMAKEDIR}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/halfgradConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/halfgradConfig.cmake" INSTALL_DESTINATION "${HALFGRAD_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/halfgradConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/halfgradConfig.cmake"
  "${PROJECT_BINARY_DIR}/halfgradConfigVersion.cmake" DESTINATION "${HALFGRAD_INSTALL_CMAKEDIR}")
