# Resolves the optional-hardware switches MESHSTORE_WITH_CUDA and
# MESHSTORE_WITH_RDMA (AUTO|ON|OFF) into MESHSTORE_HAVE_CUDA and
# MESHSTORE_HAVE_RDMA. AUTO builds a feature when its toolkit is present;
# ON fails the configure step when it is not; OFF never builds it.

set(MESHSTORE_WITH_CUDA AUTO CACHE STRING "Build CUDA support: AUTO, ON or OFF")
set_property(CACHE MESHSTORE_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(MESHSTORE_WITH_RDMA AUTO CACHE STRING "Build RDMA (libibverbs) support: AUTO, ON or OFF")
set_property(CACHE MESHSTORE_WITH_RDMA PROPERTY STRINGS AUTO ON OFF)

foreach(_opt MESHSTORE_WITH_CUDA MESHSTORE_WITH_RDMA)
  if(NOT ${_opt} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${_opt} must be AUTO, ON or OFF, not '${${_opt}}'")
  endif()
endforeach()

# RDMA: libibverbs through pkg-config.
set(MESHSTORE_HAVE_RDMA OFF)
if(NOT MESHSTORE_WITH_RDMA STREQUAL "OFF")
  pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
  if(IBVERBS_FOUND)
    set(MESHSTORE_HAVE_RDMA ON)
  elseif(MESHSTORE_WITH_RDMA STREQUAL "ON")
    message(FATAL_ERROR "MESHSTORE_WITH_RDMA=ON but libibverbs was not found "
                        "(apt-get install libibverbs-dev)")
  endif()
endif()

# CUDA: the toolkit (headers, the static runtime) and nvcc, which compiles
# the strided-copy kernel for an explicit architecture list (never "native",
# which fails on a machine without a GPU): Turing, Ampere and Hopper code,
# plus Hopper PTX that newer GPUs compile when they load it.
set(MESHSTORE_HAVE_CUDA OFF)
if(NOT MESHSTORE_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND NOT CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  if(CUDAToolkit_FOUND)
    include(CheckLanguage)
    check_language(CUDA)  # nvcc works with this host compiler
  endif()
  if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 75-real 80-real 90)
    endif()
    enable_language(CUDA)
    set(MESHSTORE_HAVE_CUDA ON)
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
    endif()
  elseif(MESHSTORE_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MESHSTORE_WITH_CUDA=ON but no working CUDA toolkit (nvcc) was found "
                        "(expected under /usr/local/cuda)")
  endif()
endif()

message(STATUS "meshstore: RDMA ${MESHSTORE_HAVE_RDMA} (MESHSTORE_WITH_RDMA=${MESHSTORE_WITH_RDMA}), "
               "CUDA ${MESHSTORE_HAVE_CUDA} (MESHSTORE_WITH_CUDA=${MESHSTORE_WITH_CUDA}; "
               "architectures ${CMAKE_CUDA_ARCHITECTURES})")
