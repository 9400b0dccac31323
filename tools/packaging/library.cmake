# The installed library (issue 14): headers, static libraries, the CMake package
# (find_package(gfrep) -> gfrep::transfer, gfrep::catalog, gfrep::netprobe, gfrep::replica_ROOM
# for each room of replica/, and gfrep::replica for all of them)
# and pkg-config's gfrep.pc. Included from the top-level CMakeLists.txt after the libraries.
#
# Layout under the prefix (GNUInstallDirs):
#   include/gfrep/{transfer,catalog,netprobe}/*.h,
#   include/gfrep/replica/{core,plan,agent,client,web,daemon}/*.h
#                                                           public headers only (never internal/);
#                                                           includes stay rooted as in the tree:
#                                                           #include "transfer/copy.h"
#   lib/<multiarch>/libgfrep_*.a                           static libraries (see README,
#                                                           "Using the library": why static only)
#   lib/<multiarch>/cmake/gfrep/                           gfrepConfig.cmake, ...Version, ...Targets
#   lib/<multiarch>/pkgconfig/gfrep.pc
#   share/gfrep/proto/catalog/proto/catalog.proto           the catalog's gRPC API (other languages)
# Components: "lib" (the archives), "dev" (headers, CMake package, gfrep.pc, the .proto).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GFREP_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/gfrep)
set(GFREP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gfrep)
set(_gfrep_libraries gfrep_transfer gfrep_catalog gfrep_catalog_proto gfrep_netprobe gfrep_replica_core
  gfrep_replica_plan gfrep_replica_agent gfrep_replica_client gfrep_replica_web gfrep_replica_daemon
  gfrep_replica)

foreach(_lib ${_gfrep_libraries})
  string(REPLACE "gfrep_" "" _name ${_lib})
  set_target_properties(${_lib} PROPERTIES EXPORT_NAME ${_name})
endforeach()

install(TARGETS ${_gfrep_libraries}
  EXPORT gfrepTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib)

# Public headers: the top of each library folder; internal/ (and every other subfolder) stays
# behind. A glob, unlike for sources (STYLE rule 25): a public header is public by where it
# lies, and CONFIGURE_DEPENDS picks up a new one at the next build. No public header includes a
# generated one (catalog.pb.h is private to the catalog).
foreach(_dir transfer catalog netprobe replica/core replica/plan replica/agent replica/client replica/web
             replica/daemon)
  file(GLOB _headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${_dir}/*.h)
  install(FILES ${_headers} DESTINATION ${GFREP_INSTALL_INCLUDEDIR}/${_dir} COMPONENT dev)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/catalog/proto/catalog.proto
  DESTINATION ${CMAKE_INSTALL_DATADIR}/gfrep/proto/catalog/proto COMPONENT dev)

install(EXPORT gfrepTargets
  NAMESPACE gfrep::
  DESTINATION ${GFREP_INSTALL_CMAKEDIR}
  COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/gfrepConfig.cmake.in
  ${PROJECT_BINARY_DIR}/packaging/gfrepConfig.cmake
  INSTALL_DESTINATION ${GFREP_INSTALL_CMAKEDIR})
# 0.x: SameMajorVersion accepts any 0.y >= the version asked for; the API may still change
# between minor versions until 1.0 (README).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/packaging/gfrepConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/packaging/gfrepConfig.cmake
              ${PROJECT_BINARY_DIR}/packaging/gfrepConfigVersion.cmake
  DESTINATION ${GFREP_INSTALL_CMAKEDIR}
  COMPONENT dev)

# gfrep.pc, relocatable like the CMake package: its prefix is found from where the file lies
# (pkg-config's ${pcfiledir}), so `cmake --install --prefix ANYWHERE` and the .deb both work.
file(RELATIVE_PATH GFREP_PC_PREFIX_FROM_PCFILEDIR
  /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" GFREP_PC_PREFIX_FROM_PCFILEDIR "${GFREP_PC_PREFIX_FROM_PCFILEDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/gfrep.pc.in ${PROJECT_BINARY_DIR}/packaging/gfrep.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/packaging/gfrep.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)
