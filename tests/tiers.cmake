# The tier rule of tests/CMakeLists.txt, checked at the end of configuring
# this directory (a deferred call, so the test files included after this one,
# in any order, are all checked): every test has exactly one of the labels
# quick and full, and asan only beside full. A test without a tier would run
# in no pass or in the wrong one, silently; this makes it a configure error.
function(zt_check_tiers)
  get_property(zt_tests DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
  foreach(zt_test ${zt_tests})
    get_test_property(${zt_test} LABELS zt_labels)
    if(NOT zt_labels)
      set(zt_labels "")
    endif()
    set(zt_tiers 0)
    foreach(zt_tier quick full)
      if(zt_tier IN_LIST zt_labels)
        math(EXPR zt_tiers "${zt_tiers} + 1")
      endif()
    endforeach()
    if(NOT zt_tiers EQUAL 1)
      message(SEND_ERROR "test ${zt_test}: labels '${zt_labels}' need exactly one of quick and full "
                         "(tests/CMakeLists.txt)")
    elseif("asan" IN_LIST zt_labels AND NOT "full" IN_LIST zt_labels)
      message(SEND_ERROR "test ${zt_test}: asan goes with full only (a quick test runs under the sanitizers anyway)")
    endif()
  endforeach()
endfunction()

# zt_label(LABEL TEST...): adds LABEL to each test's labels (the tier beside
# the subject labels add_test's caller gave).
function(zt_label label)
  foreach(zt_test ${ARGN})
    get_test_property(${zt_test} LABELS zt_labels)
    if(NOT zt_labels)
      set(zt_labels "")
    endif()
    list(APPEND zt_labels ${label})
    set_tests_properties(${zt_test} PROPERTIES LABELS "${zt_labels}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} CALL zt_check_tiers)
