# Decides whether the CUDA parts are built. GEOTRAIN_CUDA=AUTO builds them when nvcc is found
# (on PATH, in CUDACXX, or under /usr/local/cuda); ON makes a missing nvcc an error; OFF skips.
# Sets GEOTRAIN_HAVE_CUDA and, when on, the imported targets CUDA::cudart, CUDA::cublas and
# geotrain::nccl (when NCCL is found).
set(GEOTRAIN_HAVE_CUDA OFF)
if(NOT GEOTRAIN_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "GEOTRAIN_CUDA must be AUTO, ON or OFF, not '${GEOTRAIN_CUDA}'")
endif()

if(NOT GEOTRAIN_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 predates nvcc 13 and does not know its C++20 flag; teach it (nvcc has accepted
    # -std=c++20 since CUDA 12.0).
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_EXTENSIONS OFF)
    find_package(CUDAToolkit REQUIRED)
    set(GEOTRAIN_HAVE_CUDA ON)
    find_library(GEOTRAIN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(GEOTRAIN_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(GEOTRAIN_NCCL_LIBRARY AND GEOTRAIN_NCCL_INCLUDE)
      add_library(geotrain::nccl UNKNOWN IMPORTED)
      set_target_properties(geotrain::nccl PROPERTIES IMPORTED_LOCATION ${GEOTRAIN_NCCL_LIBRARY}
                                                      INTERFACE_INCLUDE_DIRECTORIES ${GEOTRAIN_NCCL_INCLUDE})
      set(GEOTRAIN_HAVE_NCCL ON)
    endif()
    message(STATUS "CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, "
                   "NCCL ${GEOTRAIN_HAVE_NCCL}")
  elseif(GEOTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "GEOTRAIN_CUDA=ON but no CUDA compiler was found (set CUDACXX)")
  else()
    message(STATUS "CUDA: nvcc not found, building the CPU-only configuration")
  endif()
endif()
