# Installation (cmake --install BUILD [--prefix P]) and the Debian package (cpack -G DEB in
# BUILD): kvtierd and the kvtier CLI, the public headers, libkvtier-client.so with a CMake
# package (kvtier::client) and a pkg-config file (kvtier-client), the systemd unit and a
# production configuration. tests/install_test.sh installs into a staging prefix and builds
# programs against what it finds there.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The library users link: the client (C++ and C APIs) as one shared object.
add_library(kvtier_client_shared SHARED ${PROJECT_SOURCE_DIR}/src/client/library.cc)
target_compile_definitions(kvtier_client_shared PRIVATE KVTIER_VERSION="${PROJECT_VERSION}")
target_link_libraries(kvtier_client_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,kvtier_client>")
target_include_directories(kvtier_client_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(kvtier_client_shared PROPERTIES
  OUTPUT_NAME kvtier-client VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME client)

set(_kvtier_programs kvtierd)
if(TARGET kvtier)
  list(APPEND _kvtier_programs kvtier)
endif()
install(TARGETS ${_kvtier_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kvtier_client_shared EXPORT kvtierTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvtier DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(_kvtier_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${_kvtier_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvtierConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvtierConfig.cmake INSTALL_DESTINATION ${_kvtier_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvtierConfig.cmake ${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
  DESTINATION ${_kvtier_cmake_dir})
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvtier-client.pc.in
  ${PROJECT_BINARY_DIR}/kvtier-client.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kvtier-client.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The service: a hardened unit and its configuration (a conffile of the package).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/kvtierd.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/kvtier.sysusers DESTINATION lib/sysusers.d
  RENAME kvtier.conf)
install(FILES ${PROJECT_SOURCE_DIR}/docs/operations.md ${PROJECT_SOURCE_DIR}/docs/protocol.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
# The configuration goes to <prefix>/etc/kvtier, or /etc/kvtier for prefix /usr (the package),
# as GNUInstallDirs places sysconfdir; decided when installing, since cpack installs with its
# own prefix.
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(_kvtier_etc /etc/kvtier)
  else()
    set(_kvtier_etc \"\${CMAKE_INSTALL_PREFIX}/etc/kvtier\")
  endif()
  file(INSTALL \"${PROJECT_SOURCE_DIR}/deploy/kvtierd.toml\" DESTINATION \"\${_kvtier_etc}\")
")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/grafana ${PROJECT_SOURCE_DIR}/deploy/prometheus
  DESTINATION ${CMAKE_INSTALL_DATADIR}/kvtier)

if(KVTIER_BUILD_TESTS AND TARGET kvtier)
  # What an operator installs: cmake --install into a staging prefix, programs built against
  # the package (CMake and pkg-config), deploy/ checked (promtool, systemd-analyze, every
  # metric it names served by kvtierd), the Debian package (cpack).
  add_test(NAME deploy
    COMMAND ${PROJECT_SOURCE_DIR}/tests/deploy_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(deploy PROPERTIES LABELS integration SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()

set(CPACK_PACKAGE_NAME kvtier)
set(CPACK_PACKAGE_VENDOR "kvtier")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Tiered, shared, persistent KV-cache store for LLM serving")
set(CPACK_PACKAGE_CONTACT "kvtier maintainers <kvtier@localhost>")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends: from the libraries the binaries link.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles ${PROJECT_SOURCE_DIR}/deploy/debian/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
