# Included by the top-level CMakeLists.txt in a -DGFREP_SANITIZE=thread build, after every
# target is defined: links the absl::Mutex TSan annotations (absl_mutex_annotations.cc, which
# says why) into every executable of the tree, so that calls from our code and from the
# shared libraries (gRPC) bind to them.
add_library(gfrep_tsan_absl_annotations OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/absl_mutex_annotations.cc)
target_link_libraries(gfrep_tsan_absl_annotations PUBLIC absl::synchronization ${CMAKE_DL_LIBS})

function(gfrep_tsan_annotate_executables dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_link_libraries(${t} PRIVATE gfrep_tsan_absl_annotations)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d IN LISTS subdirs)
    gfrep_tsan_annotate_executables(${d})
  endforeach()
endfunction()
gfrep_tsan_annotate_executables(${PROJECT_SOURCE_DIR})
