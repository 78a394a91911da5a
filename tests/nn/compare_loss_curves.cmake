# Trains the MLP for one epoch on a subset on two backends and checks that every step's loss
# agrees within float32 tolerance (relative 1e-4).
foreach(b ${BACKENDS})
  execute_process(COMMAND "${TESSERA}" train --backend ${b} --model mlp --epochs 1 --limit ${LIMIT} --batch-size 64
                          --schedule none --quiet --data "${DATA_DIR}" --json "${WORK_DIR}/curve_${b}.json"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "training on ${b} failed: ${rc}")
  endif()
endforeach()
list(GET BACKENDS 0 a)
list(GET BACKENDS 1 b)
file(READ "${WORK_DIR}/curve_${a}.json" ja)
file(READ "${WORK_DIR}/curve_${b}.json" jb)
string(JSON na LENGTH "${ja}" step_losses)
string(JSON nb LENGTH "${jb}" step_losses)
if(NOT na EQUAL nb OR na EQUAL 0)
  message(FATAL_ERROR "different numbers of steps: ${na} vs ${nb}")
endif()
math(EXPR last "${na} - 1")
set(worst 0)
foreach(i RANGE ${last})
  string(JSON la GET "${ja}" step_losses ${i})
  string(JSON lb GET "${jb}" step_losses ${i})
  # CMake's math() is integer-only: collect the pairs and compare them with awk below.
  list(APPEND pairs "${la} ${lb}")
endforeach()
string(REPLACE ";" "\n" text "${pairs}")
file(WRITE "${WORK_DIR}/curve_pairs.txt" "${text}\n")
execute_process(COMMAND awk "{ d = ($1 - $2); if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r } END { printf \"%g\", m; exit (m > 1e-4) }"
                        "${WORK_DIR}/curve_pairs.txt"
                RESULT_VARIABLE too_far OUTPUT_VARIABLE worst)
message(STATUS "${na} steps, largest relative difference ${worst}")
if(too_far)
  message(FATAL_ERROR "loss curves of ${a} and ${b} differ by ${worst} (relative) — more than float32 tolerance")
endif()
