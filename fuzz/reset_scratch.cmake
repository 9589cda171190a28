# Empties the fuzz tests' scratch corpora and artifacts before `ctest -L fuzz` (fuzz/CMakeLists.txt),
# so that each run starts from the repository's corpus alone.
file(REMOVE_RECURSE ${SCRATCH})
foreach(t ${TARGETS})
  file(MAKE_DIRECTORY ${SCRATCH}/${t})
endforeach()
file(MAKE_DIRECTORY ${ARTIFACTS})
