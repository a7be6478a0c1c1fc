# The ablation sweep (launch/ablate.py): stage x offload x recompute at np 2 on
# a small model, once without and once with a --mem-limit that some
# configurations exceed; checks the CSV, the Markdown table and the PNG plots
# (needs gnuplot, from launch/deps.sh). Included from tests/CMakeLists.txt.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME ablation_small
         COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/ablation/ablation_test.py
                 $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run ${PROJECT_SOURCE_DIR}/launch/ablate.py)
# Full: its zt-train runs are the mpi tests' configurations, and the sweep's
# own code is Python, which the sanitizers do not see.
set_tests_properties(ablation_small PROPERTIES LABELS "ablation;full" TIMEOUT 900 RUN_SERIAL TRUE)
# `--preset zero` at np 4 (8 runs of 2 steps): per-rank model state per
# parameter against the ZeRO paper's formulas within the padding. Full: the
# C paths it runs (bf16 stages 0-3, AdamW and SGD at np 4) are the other
# tests' too.
add_test(NAME ablation_zero_preset
         COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/ablation/ablation_zero_preset_test.py
                 $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run ${PROJECT_SOURCE_DIR}/launch/ablate.py)
set_tests_properties(ablation_zero_preset PROPERTIES LABELS "ablation;full" TIMEOUT 300 RUN_SERIAL TRUE)
