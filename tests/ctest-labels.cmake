# Included by ctest after the discovered tests (CMakeLists.txt): each test in a doctest suite that
# names a label gets that ctest label, read from the test binary's own listing so that any test
# name works. The labels:
#   real-model  runs the real default models (models/), seconds to minutes each: the Release suite
#               of `make test` runs them, the sanitizer suite of `make check` leaves them out;
#   check       starts servers, several processes, or injects faults (killed processes, corrupt or
#               unwritable files): `make check` runs them on the Release build, after `make test`;
#   slurm       the Slurm recipe on a loopback cluster (tests/test-slurm.cpp): labelled check too.
if(NOT EXISTS "${RAGKV_TESTS_BINARY}")
  return()
endif()
foreach(label real-model check slurm)
  execute_process(COMMAND "${RAGKV_TESTS_BINARY}" --list-test-cases "--test-suite=${label}"
                  OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(WARNING "ctest-labels: ${RAGKV_TESTS_BINARY} --list-test-cases failed (${rc}): no '${label}' label")
    continue()
  endif()
  string(REPLACE "\n" ";" lines "${listing}")
  foreach(line IN LISTS lines)
    if(line STREQUAL "" OR line MATCHES "^===" OR line MATCHES "^\\[doctest\\] ")
      continue()
    endif()
    if(label STREQUAL "slurm")
      set_tests_properties("${line}" PROPERTIES LABELS "check;slurm")
    else()
      set_tests_properties("${line}" PROPERTIES LABELS "${label}")
    endif()
  endforeach()
endforeach()
