# tessera_add_backend(): a backend folder adds its sources to the one `tessera` library and
# names the register function (register_<name>_backend) the registry calls at start-up.
# tessera_backend_missing(): records a backend that is not built and why.
# tessera_add_test(): one doctest executable registered with CTest under labels.

set_property(GLOBAL PROPERTY TESSERA_BACKENDS "")
set_property(GLOBAL PROPERTY TESSERA_MISSING_BACKENDS "")

function(tessera_add_backend name)
  # KERNEL_SOURCES get KERNEL_OPTIONS (ISA, optimisation level); SOURCES build like the core.
  cmake_parse_arguments(ARG "" "" "SOURCES;KERNEL_SOURCES;LIBRARIES;KERNEL_OPTIONS" ${ARGN})
  target_sources(tessera PRIVATE ${ARG_SOURCES} ${ARG_KERNEL_SOURCES})
  if(ARG_KERNEL_OPTIONS AND ARG_KERNEL_SOURCES)
    set_source_files_properties(${ARG_KERNEL_SOURCES} TARGET_DIRECTORY tessera PROPERTIES COMPILE_OPTIONS "${ARG_KERNEL_OPTIONS}")
  endif()
  if(ARG_LIBRARIES)
    target_link_libraries(tessera PRIVATE ${ARG_LIBRARIES})
  endif()
  set_property(GLOBAL APPEND PROPERTY TESSERA_BACKENDS ${name})
endfunction()

function(tessera_backend_missing name reason)
  string(REPLACE "\"" "'" reason "${reason}")
  string(REPLACE ";" "," reason "${reason}")
  set_property(GLOBAL APPEND PROPERTY TESSERA_MISSING_BACKENDS "X(\"${name}\", \"${reason}\")")
endfunction()

# Writes the generated header with the backend lists (read by core/src/registry.cpp).
function(tessera_finalize_backends)
  get_property(backends GLOBAL PROPERTY TESSERA_BACKENDS)
  get_property(missing GLOBAL PROPERTY TESSERA_MISSING_BACKENDS)
  set(builtin "")
  foreach(b IN LISTS backends)
    string(APPEND builtin " X(${b})")
  endforeach()
  list(JOIN missing " " missing_text)
  set(TESSERA_BUILTIN_BACKEND_LIST "${builtin}")
  set(TESSERA_MISSING_BACKEND_LIST "${missing_text}")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera_build_config.h.in
                 ${PROJECT_BINARY_DIR}/generated/tessera_build_config.h @ONLY)
  set(TESSERA_BACKENDS "${backends}" PARENT_SCOPE)
  set(TESSERA_BACKENDS "${backends}" CACHE INTERNAL "")
endfunction()

function(tessera_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBRARIES})
  doctest_discover_tests(${name} TEST_PREFIX "${name}/" PROPERTIES LABELS "${ARG_LABELS}" SKIP_RETURN_CODE 77)
endfunction()

function(tessera_print_summary)
  get_property(missing GLOBAL PROPERTY TESSERA_MISSING_BACKENDS)
  message(STATUS "Tessera ${PROJECT_VERSION}: backends [${TESSERA_BACKENDS}], CPU ISA ${TESSERA_CPU_ISA_RESOLVED}")
  foreach(m IN LISTS missing)
    message(STATUS "  not built: ${m}")
  endforeach()
endfunction()
