# The ablation sweep (launch/ablate.py): stage x offload x recompute at np 2 on
# a small model, once without and once with a --mem-limit that some
# configurations exceed; checks the CSV, the Markdown table and both PNG plots
# (needs gnuplot, from launch/deps.sh). Included from tests/CMakeLists.txt.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME ablation_small
         COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/ablation/ablation_test.py
                 $<TARGET_FILE:zt-train> ${PROJECT_SOURCE_DIR}/launch/zt-run ${PROJECT_SOURCE_DIR}/launch/ablate.py)
set_tests_properties(ablation_small PROPERTIES LABELS "ablation" TIMEOUT 900 RUN_SERIAL TRUE)
