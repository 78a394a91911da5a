# A training run killed by SIGKILL in the middle of writing its second checkpoint leaves the
# first checkpoint loadable; resuming from it (with a different thread count) ends with a
# checkpoint byte-identical to an uninterrupted run's — the same weights, optimizer state,
# RNG state and counters.
set(dir "${WORK_DIR}/checkpoint_crash")
file(REMOVE_RECURSE "${dir}")
file(MAKE_DIRECTORY "${dir}")
set(common train --model mlp --epochs 3 --limit 2000 --batch-size 64 --seed 5 --quiet --data "${DATA_DIR}")

execute_process(COMMAND "${TESSERA}" ${common} --threads 2 --checkpoint "${dir}/straight.safetensors" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "uninterrupted run failed: ${rc}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -E env TESSERA_TEST_CRASH_IN_SAVE=2
                        "${TESSERA}" ${common} --threads 2 --checkpoint "${dir}/resumed.safetensors"
                RESULT_VARIABLE rc)
if(rc EQUAL 0)
  message(FATAL_ERROR "the run that should have been killed while writing a checkpoint exited normally")
endif()
message(STATUS "killed run ended with: ${rc}")
file(GLOB partial "${dir}/resumed.safetensors.tmp.*")
if(NOT partial)
  message(FATAL_ERROR "no partial temporary file: the kill did not happen during the write")
endif()

# The surviving checkpoint (epoch 1) loads: resuming with --epochs 1 only evaluates it.
execute_process(COMMAND "${TESSERA}" train --model mlp --epochs 1 --limit 2000 --batch-size 64 --seed 5 --quiet
                        --data "${DATA_DIR}" --checkpoint "${dir}/resumed.safetensors" --resume
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "test accuracy")
  message(FATAL_ERROR "the previous checkpoint does not load after the crash: ${rc} ${out}")
endif()

execute_process(COMMAND "${TESSERA}" ${common} --threads 1 --checkpoint "${dir}/resumed.safetensors" --resume RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "resumed run failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${dir}/straight.safetensors" "${dir}/resumed.safetensors"
                RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "resumed run's final checkpoint differs from the uninterrupted run's")
endif()
message(STATUS "resumed checkpoint is byte-identical to the uninterrupted run")
