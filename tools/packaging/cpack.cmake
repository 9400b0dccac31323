# The Debian package (issue 14, "Operations packaging"): one .deb with the tools, the
# systemd units, example settings, the libraries, headers, CMake package and gfrep.pc.
# Included at the end of the top-level CMakeLists.txt. From a built tree:
#   cpack --config build/CPackConfig.cmake -B OUTDIR      -> OUTDIR/gfrep_<version>_<arch>.deb
# It packages what is built (no rebuild: install does not depend on "all" here, so build the
# tools first). Depends is computed by dpkg-shlibdeps (dpkg-dev) from the binaries.
include(GNUInstallDirs)

# Install steps (and so cpack) do not build "all" first: the build directory is shared and
# the tests are many; `cmake --build build` comes first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(_gfrep_packaging ${CMAKE_CURRENT_LIST_DIR})
install(FILES ${_gfrep_packaging}/systemd/gfcatalogd.service ${_gfrep_packaging}/systemd/gfsited.service
  DESTINATION lib/systemd/system COMPONENT bin)
# postinst copies these to /etc/gfrep on first install (ExecStart reads them there).
install(FILES ${_gfrep_packaging}/gfcatalogd.toml ${_gfrep_packaging}/gfsited.toml
  DESTINATION ${CMAKE_INSTALL_DATADIR}/gfrep/examples COMPONENT bin)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT bin)

set(CPACK_PACKAGE_NAME gfrep)
set(CPACK_PACKAGE_VENDOR "gfrep")
set(CPACK_PACKAGE_CONTACT "gfrep maintainers <gfrep@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "WAN replication service: striped transfers, shared catalog, replication policies")
set(CPACK_PACKAGE_DESCRIPTION
  "gfrep moves and replicates files between sites over long fat networks: gfsited site
agents (striped multi-stream TLS transfers), the gfcatalogd catalog (namespace, replicas,
policies), command-line tools, systemd units, and the C++ library with its CMake package.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL OFF)  # one package with every component (bin, lib, dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# zstd (dpkg reads it since 1.21.18; Debian 12 has 1.21.22): cpack takes 0.71 of gzip's time
# for a package of about the same size (tests/bench/RESULTS.md, "CI's CPU budget").
set(CPACK_DEBIAN_COMPRESSION_TYPE zstd)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# postinst runs adduser; shlibdeps' list is appended to this one.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
# The dashboard's charts (gfcatalogd --http), fusermount3 for gfmount.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libjs-dygraphs, fuse3")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${_gfrep_packaging}/debian/postinst ${_gfrep_packaging}/debian/prerm ${_gfrep_packaging}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The static libraries' debug sections are most of their size: stripped in the package
# (the tools are stripped by CPACK_STRIP_FILES).
set(CPACK_PRE_BUILD_SCRIPTS ${_gfrep_packaging}/strip-archives.cmake)
include(CPack)
