# interop_data: token files as data (issue 43, item 3; docs/data.md). Each
# case checks every step's stream position and tokens digest against what
# the script computes from the files. The quick ones (np 3 rows, the
# evaluation's neutrality) also run under the sanitizers, which see the
# reader's paths there; the malformed files (a dozen refused starts), the
# format grid, the resume across world sizes and the epoch wrap in the
# normal pass.
foreach(zt_case formats uneven resume epochs eval bad)
  add_test(NAME interop_data_${zt_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/interop/zt_token_data_test.py ${zt_case}
                   $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(interop_data_${zt_case} PROPERTIES LABELS "mpi;data" TIMEOUT 300 RUN_SERIAL TRUE)
endforeach()
zt_label(quick interop_data_uneven interop_data_eval)
zt_label(full interop_data_formats interop_data_resume interop_data_epochs interop_data_bad)
