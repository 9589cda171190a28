# geotrain_target_defaults(target): warnings and the floating-point contract for our own code.
# -ffp-contract=off: no silent a*b+c -> fma, so the CPU codecs produce the exact bytes of their
# CUDA twins (which are compiled with --fmad=false for the same reason).
function(geotrain_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                              -ffp-contract=off>)
  if(GEOTRAIN_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()
