# Debian packages (docs/install.md), made from a build tree with
#   cpack -G DEB --config build/CPackConfig.cmake -B OUTDIR
#
#   meshstore         the programs (meshstore, meshrun, store_bench), under /usr
#   meshstore-dev     the API's headers, the static libraries (debug info
#                     stripped), meshstoreConfig.cmake and meshstore.pc
#   python3-meshstore the Python package, in /usr/lib/python3/dist-packages
#                     (python/CMakeLists.txt picks that directory for /usr)
#
# tests/install/deb_test.sh builds the packages, checks what each holds,
# unpacks them into a scratch root, builds examples/consumer against that
# root and imports the Python package from it.

# The static libraries carry full debug info (-g: about 830 MB); a stripped
# install (cmake --install --strip, and CPack, which strips) drops it from
# them as it does from the programs.
configure_file(${PROJECT_SOURCE_DIR}/cmake/strip_archives.cmake.in
               ${PROJECT_BINARY_DIR}/strip_archives.cmake @ONLY)
install(SCRIPT ${PROJECT_BINARY_DIR}/strip_archives.cmake COMPONENT Development)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME meshstore)
set(CPACK_PACKAGE_VENDOR "meshstore")
set(CPACK_PACKAGE_CONTACT "meshstore developers <meshstore-dev@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Actor runtime and distributed tensor store")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL Runtime Development)
if(TARGET meshstore_python)
  list(APPEND CPACK_COMPONENTS_ALL Python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME meshstore)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION utils)
# The programs' shared libraries (CAF, spdlog, protobuf, OpenSSL, ...), as
# dpkg-shlibdeps (dpkg-dev, part of build-essential) finds them.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME meshstore-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
# What a program linking the static libraries needs: meshstoreConfig.cmake's
# find_dependency calls and meshstore.pc's Requires.
set(_meshstore_dev_depends
    "meshstore (= ${PROJECT_VERSION}), libcaf-dev, libspdlog-dev, libfmt-dev, libprotobuf-dev, libssl-dev, prometheus-cpp-dev, libboost-dev")
if(MESHSTORE_HAVE_RDMA)
  string(APPEND _meshstore_dev_depends ", libibverbs-dev")
endif()
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "${_meshstore_dev_depends}")
if(TARGET meshstore_python)
  # The module is built for this Python (cpython-3.11 on Debian 12) and
  # links CAF and the rest as the programs do; torch and numpy are where
  # its tensors come from.
  math(EXPR _meshstore_next_minor "${Python_VERSION_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-meshstore)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}), python3 (<< ${Python_VERSION_MAJOR}.${_meshstore_next_minor})")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-torch, python3-numpy")
endif()
include(CPack)
