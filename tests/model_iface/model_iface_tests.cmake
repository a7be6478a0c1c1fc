# The model interface on its own (tests/model_iface/): a two-unit MLP
# family written in the test against train/zt_train_model.h alone, built
# into zt-train-mlp and zt-plan-mlp, and trained at np 2 through launch/zt-run
# by zt_model_iface_test.py (harness: tests/mpi/zt_harness.py). Included
# from tests/CMakeLists.txt.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_library(zt_model_mlp STATIC ${CMAKE_CURRENT_SOURCE_DIR}/model_iface/mlp_model.c)
target_link_libraries(zt_model_mlp PUBLIC zt_train)
zt_add_train_programs(SUFFIX -mlp FAMILIES mlp LIBS zt_model_mlp)

# stages: stages 0-3 bitwise at np 2, the loss falls, another seed differs;
# refusals: --model gpt, zt-plan's missing walk, a unit the MLP lacks.
foreach(zt_case stages refusals)
  add_test(NAME model_iface_${zt_case}
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/model_iface/zt_model_iface_test.py ${zt_case}
                   $<TARGET_FILE:zt-train-mlp> ${PROJECT_SOURCE_DIR}/launch/zt-run)
  set_tests_properties(model_iface_${zt_case} PROPERTIES LABELS "quick" TIMEOUT 300 RUN_SERIAL TRUE)
endforeach()
# The refusals' C paths (the family lookup, a missing planner walk) are
# cli_deepspeed_problems' error exit and a few lines of train/: the normal
# build only.
set_tests_properties(model_iface_refusals PROPERTIES LABELS "full")
