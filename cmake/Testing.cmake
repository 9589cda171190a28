# geotrain_add_suite(NAME <name> LABEL <folder> SOURCES <...> LIBS <...> [GPU] [OWN_MAIN] [NO_UNITY]
#                    [TIMEOUT s])
# One doctest executable per suite, registered as one ctest test labelled with its folder.
# GPU suites also get the label `gpu`; they exit with 77 when no device is present, which
# ctest reports as SKIPPED (SKIP_RETURN_CODE), never as a pass. OWN_MAIN suites bring their own
# main(), which exits with 77 when the machine cannot run them (the reason on stdout).
add_library(geotrain_doctest_main OBJECT ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp)
target_link_libraries(geotrain_doctest_main PUBLIC doctest::doctest)

if(GEOTRAIN_HAVE_CUDA)
  add_library(geotrain_gpu_test_main OBJECT ${PROJECT_SOURCE_DIR}/tests/gpu_main.cpp)
  target_link_libraries(geotrain_gpu_test_main PUBLIC doctest::doctest geotrain_kernels_cuda)
  target_include_directories(geotrain_gpu_test_main PRIVATE ${PROJECT_SOURCE_DIR})
endif()

# NO_UNITY: the suite's files are compiled one by one even in a unity build (GEOTRAIN_UNITY_BUILD),
# for suites whose files keep file-local helpers of the same names (GPU suites always are).
function(geotrain_add_suite)
  cmake_parse_arguments(S "GPU;OWN_MAIN;NO_UNITY" "NAME;LABEL;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${S_NAME} ${S_SOURCES})
  if(S_NO_UNITY OR S_GPU)  # GPU suites: small, and their files share helper names
    set_target_properties(${S_NAME} PROPERTIES UNITY_BUILD OFF)
  endif()
  if(S_GPU)
    target_link_libraries(${S_NAME} PRIVATE geotrain_gpu_test_main ${S_LIBS})
  elseif(S_OWN_MAIN)
    target_link_libraries(${S_NAME} PRIVATE doctest::doctest ${S_LIBS})
  else()
    target_link_libraries(${S_NAME} PRIVATE geotrain_doctest_main ${S_LIBS})
  endif()
  target_include_directories(${S_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  set_target_properties(${S_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  geotrain_target_defaults(${S_NAME})
  add_test(NAME ${S_NAME} COMMAND ${S_NAME} --no-version)
  set(labels ${S_LABEL})
  if(S_GPU)
    list(APPEND labels gpu)
  endif()
  if(S_GPU OR S_OWN_MAIN)
    set_tests_properties(${S_NAME} PROPERTIES SKIP_RETURN_CODE 77)
  endif()
  if(NOT S_TIMEOUT)
    set(S_TIMEOUT 300)
  endif()
  set_tests_properties(${S_NAME} PROPERTIES LABELS "${labels}" TIMEOUT ${S_TIMEOUT})
  if(NOT S_GPU AND NOT S_OWN_MAIN)
    # doctest_main.cpp's watchdog names the test case still running 10 s before ctest's kill.
    math(EXPR deadline "${S_TIMEOUT} - 10")
    set_tests_properties(${S_NAME} PROPERTIES ENVIRONMENT "GEOTRAIN_TEST_DEADLINE_S=${deadline}")
  endif()
endfunction()
