# libzt_cuda.so: the CUDA backend (runtime/cuda) and the CUDA communicators
# (comm/comm_staged.c, comm/comm_nccl.c) with the CUDA libraries they link,
# opened by runtime/cuda_module.c when a run selects a GPU. It carries its
# own copy of the runtime's static libraries (they hold no global state) and
# exports one symbol (zt_cuda_module.map). Written to build/lib, which every
# program finds as ../lib from its own folder.
add_library(zt_cuda MODULE ${PROJECT_SOURCE_DIR}/runtime/cuda/module_entry.c)
target_link_libraries(zt_cuda PRIVATE zt_runtime_cuda zt_comm_cuda)
target_link_options(zt_cuda PRIVATE "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/zt_cuda_module.map"
                    -Wl,--no-undefined)
set_target_properties(zt_cuda PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
                      LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/zt_cuda_module.map)
if(ZT_CUDA_EMU)
  target_compile_definitions(zt_cuda PRIVATE ZT_CUDA_EMULATED)
endif()
