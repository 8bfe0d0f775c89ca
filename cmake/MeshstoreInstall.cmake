# What `cmake --install build --prefix P` puts under P (docs/install.md):
#
#   include/meshstore/...            the API: the runtime's public headers, the
#                                    store's (store.hpp, store_mesh.hpp), the
#                                    persistence layer's and version.hpp; the
#                                    transports, internal/ and the store's modules
#                                    are private (tests/install/installed_headers.txt)
#   lib/libmeshstore_*.a             the libraries
#   lib/cmake/meshstore/             meshstoreConfig.cmake (+ version file,
#                                    FindCAF.cmake, the exported targets)
#   lib/pkgconfig/meshstore.pc       for pkg-config users
#   bin/meshstore, meshrun, ...      the user-facing programs
#
# Exported targets, all under meshstore::  — link meshstore::meshstore for the
# store (it brings the transports and the runtime), meshstore::persistence for
# safetensors checkpoints, meshstore::runtime for meshes and futures alone.
include(CMakePackageConfigHelpers)

set(MESHSTORE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/meshstore)

# meshstore_public_headers(<out-var> <layer-dir>): the headers a layer installs,
# relative to the layer's folder (meshstore/...). Private headers live in
# folders with these names and are never installed; the same list feeds the
# "every public header compiles alone" check (tests/headers/).
set(MESHSTORE_PRIVATE_HEADER_DIRS
  "^meshstore/internal/"            # runtime internals
  "^meshstore/transports/"          # the transports: the store's business, not the API's
  "^meshstore/cuda/"                # the runtime's CUDA backends
  "^meshstore/protocol/"            # what the store's modules share (CAF interfaces, wire records)
  "^meshstore/volume/"              # the store's modules (actors/CMakeLists.txt)
  "^meshstore/controller/"
  "^meshstore/client/"
  "^meshstore/state_dicts/"
  "^meshstore/store/")
function(meshstore_public_headers out dir)
  file(GLOB_RECURSE headers RELATIVE ${dir} CONFIGURE_DEPENDS ${dir}/meshstore/*.hpp)
  foreach(private IN LISTS MESHSTORE_PRIVATE_HEADER_DIRS)
    list(FILTER headers EXCLUDE REGEX "${private}")
  endforeach()
  list(SORT headers)
  set(${out} ${headers} PARENT_SCOPE)
endfunction()

set(MESHSTORE_LAYER_DIRS ${PROJECT_SOURCE_DIR}/runtime ${PROJECT_SOURCE_DIR}/transports
    ${PROJECT_SOURCE_DIR}/actors ${PROJECT_SOURCE_DIR}/persistence)
set(MESHSTORE_PUBLIC_HEADERS "")  # absolute paths, for tests/headers/
foreach(layer IN LISTS MESHSTORE_LAYER_DIRS)
  meshstore_public_headers(headers ${layer})
  foreach(h IN LISTS headers)
    get_filename_component(sub ${h} DIRECTORY)
    install(FILES ${layer}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${sub}
            COMPONENT Development)
    list(APPEND MESHSTORE_PUBLIC_HEADERS ${layer}/${h})
  endforeach()
endforeach()
# Generated headers.
install(FILES ${PROJECT_BINARY_DIR}/runtime/meshstore/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/meshstore COMPONENT Development)
list(APPEND MESHSTORE_PUBLIC_HEADERS ${PROJECT_BINARY_DIR}/runtime/meshstore/version.hpp)

# Libraries, each with its exported name.
set(MESHSTORE_EXPORTED_LIBRARIES
  meshstore_runtime:runtime
  meshstore_transport_core:transport_core
  meshstore_transport_rpc:transport_rpc
  meshstore_transport_shm:transport_shm
  meshstore_transport_tcp:transport_tcp
  meshstore_transport_cma:transport_cma
  meshstore_transport_cuda:transport_cuda)
if(MESHSTORE_HAVE_RDMA)
  list(APPEND MESHSTORE_EXPORTED_LIBRARIES meshstore_transport_rdma:transport_rdma)
endif()
list(APPEND MESHSTORE_EXPORTED_LIBRARIES
  meshstore_transports:transports
  meshstore_protocol:protocol
  meshstore_volume:volume
  meshstore_controller:controller
  meshstore_client:client
  meshstore_state_dicts:state_dicts
  meshstore_store:meshstore
  meshstore_persistence:persistence)
set(_libs "")
set(_pc_libs "")
foreach(entry IN LISTS MESHSTORE_EXPORTED_LIBRARIES)
  string(REPLACE ":" ";" pair ${entry})
  list(GET pair 0 target)
  list(GET pair 1 name)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  list(APPEND _libs ${target})
  # pkg-config wants the dependents first: the list above runs the other way.
  set(_pc_libs "-l${target} ${_pc_libs}")
endforeach()
install(TARGETS ${_libs} EXPORT meshstoreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT meshstoreTargets NAMESPACE meshstore:: DESTINATION ${MESHSTORE_CMAKE_DIR}
        COMPONENT Development)

# The user-facing programs.
set(_programs meshstore meshrun)
if(TARGET store_bench)
  list(APPEND _programs store_bench)
endif()
install(TARGETS ${_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)

# find_package(meshstore): the config, its version (same major version
# compatible) and the CAF finder it needs (Debian's CAF ships none).
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/meshstoreConfig.cmake.in
  ${PROJECT_BINARY_DIR}/meshstoreConfig.cmake INSTALL_DESTINATION ${MESHSTORE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshstoreConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/meshstoreConfig.cmake
        ${PROJECT_BINARY_DIR}/meshstoreConfigVersion.cmake
        ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${MESHSTORE_CMAKE_DIR} COMPONENT Development)

# pkg-config: meshstore.pc, relocatable (it finds the prefix from its own
# place), listing every library a static link needs.
set(MESHSTORE_PC_REQUIRES "spdlog protobuf openssl prometheus-cpp-core")
set(MESHSTORE_PC_LIBS "${_pc_libs}-lcaf_openssl -lcaf_io -lcaf_core -lrt -ldl -pthread")
if(MESHSTORE_HAVE_RDMA)
  string(APPEND MESHSTORE_PC_REQUIRES " libibverbs")
endif()
if(MESHSTORE_HAVE_CUDA)
  string(APPEND MESHSTORE_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl")
endif()
file(RELATIVE_PATH MESHSTORE_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" MESHSTORE_PC_TO_PREFIX "${MESHSTORE_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/meshstore.pc.in ${PROJECT_BINARY_DIR}/meshstore.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/meshstore.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT Development)
