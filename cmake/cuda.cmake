# ZT_CUDA=AUTO|ON|OFF|EMU. AUTO enables CUDA only when nvcc is found, so a
# machine without the toolkit keeps building. EMU builds the same CUDA backend,
# kernels and NCCL communicator as host C++ against the CPU emulation of the
# CUDA runtime, cuBLAS(Lt) and NCCL in tests/cuda_emu (headers from the CUDA
# toolkit, no nvcc needed): the GPU code paths run, slowly, on a machine
# without a GPU. Never for production: see tests/cuda_emu/README.md.
#
# Sets ZT_HAVE_CUDA, ZT_CUDA_EMU, and for the CMakeLists that link CUDA:
#   ZT_CUDART      the CUDA runtime (CUDA::cudart, or the emulator)
#   ZT_CUBLAS      cuBLAS and cuBLASLt (or the emulator)
#   zt_cuda_sources(<out-var> <file.cu>...)  the sources to compile: the .cu
#                  files themselves, or their translation for the emulator.
set(ZT_HAVE_CUDA OFF)
set(ZT_CUDA_EMU OFF)
if(ZT_CUDA STREQUAL "ON" OR ZT_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "GPU compute capabilities to build for (90: H100/H200)")
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    set(ZT_HAVE_CUDA ON)
  elseif(ZT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZT_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
elseif(ZT_CUDA STREQUAL "EMU")
  enable_language(CXX)
  set(CMAKE_CXX_STANDARD 17)
  set(CMAKE_CXX_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED) # headers only
  set(ZT_HAVE_CUDA ON)
  set(ZT_CUDA_EMU ON)
elseif(NOT ZT_CUDA STREQUAL "OFF")
  message(FATAL_ERROR "ZT_CUDA must be AUTO, ON, OFF or EMU (got '${ZT_CUDA}')")
endif()

if(ZT_CUDA_EMU)
  set(ZT_CUDART zt_cuda_emu)
  set(ZT_CUBLAS zt_cuda_emu)
  include(${PROJECT_SOURCE_DIR}/tests/cuda_emu/translate.cmake)
elseif(ZT_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(ZT_CUDART CUDA::cudart)
  set(ZT_CUBLAS CUDA::cublas CUDA::cublasLt)
  function(zt_cuda_sources out)
    set(${out} ${ARGN} PARENT_SCOPE)
  endfunction()
endif()
message(STATUS "zerotrain: CUDA backend ${ZT_HAVE_CUDA} (ZT_CUDA=${ZT_CUDA})")
