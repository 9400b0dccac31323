# CPACK_PRE_BUILD_SCRIPTS (tools/packaging/cpack.cmake): strip the debug sections of the
# static libraries staged for the package. CPACK_STRIP_FILES does not touch archives.
file(GLOB_RECURSE _archives "${CPACK_TEMPORARY_DIRECTORY}/*.a")
foreach(_a ${_archives})
  execute_process(COMMAND strip --strip-debug "${_a}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "strip --strip-debug ${_a} failed (${_rc})")
  endif()
endforeach()
