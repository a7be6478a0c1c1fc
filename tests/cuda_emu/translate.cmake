# zt_cuda_sources(<out-var> <file.cu>...) for the CUDA emulator: writes each
# .cu, translated, to <binary dir>/emu/<name>.cpp and returns those paths.
#
# The translation is mechanical and keeps every line where it was (errors
# point into the .cu through #line):
#   kernel<<<grid, block, smem, stream>>>(args)
#       -> zt_emu_launch(kernel, grid, block, smem, stream)(args)
#   extern __shared__ T name[];  ->  T *name = (T *)zt_emu_dynamic_shared();
#   __shared__ T a[N], b[M];      ->  the same, then ZT_EMU_SHARED_FRESH(a);
#                                     ZT_EMU_SHARED_FRESH(b); on that line
# (static shared memory is garbage at the start of every block on a GPU;
# the macro fills it with NaN bytes at its first use in each block and counts
# it against the shared memory limits). A static declaration this cannot
# rewrite (more than two names, or spread over lines) stops the configure
# step, so none goes unpoisoned.
# Everything else CUDA C++ needs comes from emu_kernel.h, force-included.
# Reconfiguring happens by itself when a .cu changes (CMAKE_CONFIGURE_DEPENDS).
function(zt_cuda_sources out)
  set(result)
  foreach(cu ${ARGN})
    get_filename_component(abs ${cu} ABSOLUTE)
    get_filename_component(name ${cu} NAME_WE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${abs})
    file(READ ${abs} text)
    string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*)[ \t]*<<<" "zt_emu_launch(\\1, " text "${text}")
    string(REPLACE ">>>" ")" text "${text}")
    string(REGEX REPLACE "extern[ \t]+__shared__[ \t]+([A-Za-z_0-9]+)[ \t]+([A-Za-z_0-9]+)\\[\\];"
           "\\1 *\\2 = (\\1 *)zt_emu_dynamic_shared();" text "${text}")
    # Static declarations start a line (so comments that mention them do
    # not match); a leading newline lets the first line match too.
    set(text "\n${text}")
    set(id "[A-Za-z_][A-Za-z_0-9]*")
    set(dims "(\\[[^];\n]*\\])*")
    set(decl "(\n[ \t]*__shared__[ \t]+[A-Za-z_0-9: \t]*[ \t]")
    string(REGEX REPLACE "${decl}(${id})${dims}[ \t]*,[ \t]*(${id})${dims}[ \t]*;)"
           "\\1 ZT_EMU_SHARED_FRESH(\\2); ZT_EMU_SHARED_FRESH(\\4);" text "${text}")
    string(REGEX REPLACE "${decl}(${id})${dims}[ \t]*;)" "\\1 ZT_EMU_SHARED_FRESH(\\2);" text "${text}")
    string(REGEX REPLACE "\n[^\n]*ZT_EMU_SHARED_FRESH[^\n]*" "" rest "${text}")
    if(rest MATCHES "\n[ \t]*__shared__[^\n]*")
      message(FATAL_ERROR "CUDA emulator: cannot rewrite this static __shared__ declaration in ${abs}:"
                          "${CMAKE_MATCH_0}\nDeclare one or two arrays per line.")
    endif()
    string(SUBSTRING "${text}" 1 -1 text)
    set(gen ${CMAKE_CURRENT_BINARY_DIR}/emu/${name}.cpp)
    file(CONFIGURE OUTPUT ${gen} CONTENT "#line 1 \"${abs}\"\n${text}" @ONLY)
    set_source_files_properties(${gen} PROPERTIES
      COMPILE_OPTIONS "-include;${PROJECT_SOURCE_DIR}/tests/cuda_emu/emu_kernel.h;-ffp-contract=off;-Wno-unknown-pragmas"
      INCLUDE_DIRECTORIES "${PROJECT_SOURCE_DIR}/tests/cuda_emu;${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND result ${gen})
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()
