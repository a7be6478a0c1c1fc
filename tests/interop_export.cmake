# interop_export: the tests of one part of issue 43 (interop), registered here.
# zt-export --format hf (tests/interop/zt_export_hf_test.py, one test per
# case): each trains a tiny model for 2 steps at world size 1 and checks the
# Hugging Face directory against transformers' layout and the native export.
foreach(zt_case gpt_untied gpt_tied llama_gqa llama_tied sharded old_manifest refusals)
  add_test(NAME interop_export_${zt_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/interop/zt_export_hf_test.py ${zt_case}
                   $<TARGET_FILE:zt-train> $<TARGET_FILE:zt-export>)
  set_tests_properties(interop_export_${zt_case} PROPERTIES LABELS "interop" TIMEOUT 300)
endforeach()
zt_label(quick interop_export_gpt_untied interop_export_gpt_tied interop_export_llama_gqa interop_export_sharded
               interop_export_old_manifest interop_export_refusals)
# A tied Llama runs the C paths of the tied GPT and of llama_gqa.
zt_label(full interop_export_llama_tied)

# zt-train --init-from (tests/interop/zt_import_hf_test.py, one test per
# case): round trips through an export at np 1 and 3, stages 0 and 3 (the
# imported run's first loss and params digest equal the resumed
# checkpoint's, both at --lr 0), sharded and 16-bit files, and refusals.
# Runs go through launch/zt-run (mpirun), so the tests run serially.
foreach(zt_case roundtrip_gpt roundtrip_gpt_tied roundtrip_llama_gqa sharded half mismatch tensors)
  add_test(NAME interop_import_${zt_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/interop/zt_import_hf_test.py ${zt_case}
                   $<TARGET_FILE:zt-train> $<TARGET_FILE:zt-export> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(interop_import_${zt_case} PROPERTIES LABELS "interop" TIMEOUT 600 RUN_SERIAL TRUE)
endforeach()
zt_label(quick interop_import_roundtrip_gpt interop_import_roundtrip_llama_gqa interop_import_mismatch
               interop_import_tensors)
# The tied GPT differs from the untied one by one absent tensor; sharded and
# 16-bit files reach the reader's index and conversion paths, which a
# single fp32 file does not.
zt_label(full interop_import_roundtrip_gpt_tied interop_import_sharded interop_import_half)
