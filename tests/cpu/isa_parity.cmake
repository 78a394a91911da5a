# ctest -P script: runs the digest program (isa_digest.cpp) under both CPU kernel sets and
# fails unless they print the same bits. -DDIGEST=<path to tests_cpu_isa_digest>
foreach(isa avx2 avx512)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env TESSERA_CPU_ISA=${isa} ${DIGEST}
                  OUTPUT_VARIABLE out_${isa} ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 AND isa STREQUAL "avx512" AND err MATCHES "lacks AVX-512")
    message(STATUS "SKIPPED: this CPU lacks AVX-512, so only one kernel set runs here")
    return()
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "isa_digest under ${isa} failed (${rc}): ${err}")
  endif()
endforeach()
if(NOT out_avx2 STREQUAL out_avx512)
  message(FATAL_ERROR "the AVX2 and AVX-512 kernel sets give different bits:\n--- avx2\n${out_avx2}--- avx512\n${out_avx512}")
endif()
string(REGEX MATCHALL "\n" lines "${out_avx2}")
list(LENGTH lines count)
message(STATUS "identical bits on ${count} results")
