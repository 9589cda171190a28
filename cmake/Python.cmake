# The Python module (python/, docs/python.md): pybind11 bindings of the C++ core, built when
# GEOTRAIN_PYTHON is ON, or AUTO and Debian's pybind11-dev and Python headers are found.
# The interpreter is Debian's /usr/bin/python3 when it exists (the one with python3-torch),
# whatever python3 comes first on PATH; -DPython3_EXECUTABLE=... picks another.
# Every static library that the module links must be position-independent, so the whole build
# is compiled with -fPIC whether or not the module is built (CMakeLists.txt): the demo's build of
# the binary alone (preset `run`) and the test command's (preset `release`) then share every
# object in build/, and the second compiles only what the first did not need.
set(GEOTRAIN_PYTHON AUTO CACHE STRING "Build the Python module: AUTO (when pybind11 is found), ON or OFF")
set_property(CACHE GEOTRAIN_PYTHON PROPERTY STRINGS AUTO ON OFF)

set(GEOTRAIN_HAVE_PYTHON OFF)
if(NOT GEOTRAIN_PYTHON STREQUAL "OFF")
  if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module)
  if(Python3_FOUND)
    find_package(pybind11 CONFIG)
  endif()
  if(Python3_FOUND AND pybind11_FOUND)
    set(GEOTRAIN_HAVE_PYTHON ON)
  elseif(GEOTRAIN_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "GEOTRAIN_PYTHON=ON needs Python 3 headers and pybind11 "
                        "(scripts/bootstrap.sh installs python3-dev and pybind11-dev)")
  else()
    message(STATUS "Python module: off (pybind11-dev or Python headers not found)")
  endif()
endif()
