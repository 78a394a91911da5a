# The official ONNX node tests (libonnx-testdata) on one backend: no wrong answer and no crash
# (unsupported ops and dtypes are skipped, by name), and at least MIN_PERCENT of all cases pass.
# Arguments: -DTESSERA= -DSUITE= -DBACKEND= -DOUT= -DMIN_PERCENT=
execute_process(COMMAND "${TESSERA}" onnx test "${SUITE}" --backend ${BACKEND} --json "${OUT}/onnx_${BACKEND}.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}")
if(NOT out MATCHES "([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped")
  message(FATAL_ERROR "no closing counts (exit ${rc}): ${err}")
endif()
set(passed ${CMAKE_MATCH_1})
set(failed ${CMAKE_MATCH_2})
set(skipped ${CMAKE_MATCH_3})
if(NOT failed EQUAL 0 OR NOT rc EQUAL 0)
  message(FATAL_ERROR "${failed} ONNX node cases gave a wrong answer or crashed on ${BACKEND}: ${err}")
endif()
math(EXPR total "${passed} + ${failed} + ${skipped}")
math(EXPR percent "100 * ${passed} / ${total}")
if(percent LESS MIN_PERCENT)
  message(FATAL_ERROR "only ${passed} of ${total} ONNX node cases pass on ${BACKEND} (${percent}%, want >= ${MIN_PERCENT}%)")
endif()
message(STATUS "onnx node suite on ${BACKEND}: ${passed} of ${total} pass (${percent}%), ${skipped} skipped")
