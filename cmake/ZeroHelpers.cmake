# Shared CMake helpers.

# Add every immediate subdirectory of `dir` that has a CMakeLists.txt.
function(zero_add_subdirs dir)
  file(GLOB _children LIST_DIRECTORIES true "${dir}/*")
  list(SORT _children)
  foreach(_c IN LISTS _children)
    if(IS_DIRECTORY "${_c}" AND EXISTS "${_c}/CMakeLists.txt")
      add_subdirectory("${_c}")
    endif()
  endforeach()
endfunction()

# zero_add_plugin(NAME name SOURCES ...): builds libzero-plugin-<name>.so into
# ${ZERO_PLUGIN_BUILD_DIR}, exporting only its table (zero_plugin_v4), and
# installs it.  A plugin sees only abi/ and the plugin kit (kit/, linked in
# statically as zero::kit), like a third-party plugin built on the
# installed kit would.
function(zero_add_plugin)
  cmake_parse_arguments(P "" "NAME" "SOURCES;LIBS" ${ARGN})
  set(_t zero-plugin-${P_NAME})
  add_library(${_t} MODULE ${P_SOURCES})
  set_target_properties(${_t} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "zero-plugin-${P_NAME}"
    LIBRARY_OUTPUT_DIRECTORY "${ZERO_PLUGIN_BUILD_DIR}"
    C_VISIBILITY_PRESET hidden
    LINK_DEPENDS "${ZERO_SOURCE_DIR}/cmake/plugin.map")
  target_include_directories(${_t} PRIVATE "${ZERO_SOURCE_DIR}/abi")
  target_link_libraries(${_t} PRIVATE zero_kit zero_warnings m ${P_LIBS})
  target_link_options(${_t} PRIVATE
    "-Wl,--version-script=${ZERO_SOURCE_DIR}/cmake/plugin.map" "-Wl,--no-undefined")
  install(TARGETS ${_t} LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}/zero/plugins")
endfunction()

# zero_install_executable(target): installs a command-line tool or demo into
# bindir with a RUNPATH to the installed libdir, relative to $ORIGIN, so that
# PREFIX/bin/<tool> finds libzero.so.1 with no LD_LIBRARY_PATH wherever the
# prefix is moved (CMake's default install drops the build tree's RPATH).
function(zero_install_executable target)
  file(RELATIVE_PATH _rel "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
  set_property(TARGET ${target} APPEND PROPERTY INSTALL_RPATH "$ORIGIN/${_rel}")
  install(TARGETS ${target} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endfunction()

# The environment every test runs in (a test adds to it with
# set_property(TEST t APPEND PROPERTY ENVIRONMENT ...); setting the property
# instead drops it).  For Open MPI, on one machine:
#  - rmaps_base_oversubscribe: more ranks than cores (2 cores in CI);
#  - pml ob1: the point-to-point layer --mca btl self,vader already assumes
#    (the btl list means nothing to another pml).  Left to choose, Open MPI
#    also opens the cm pml and its MTLs (psm, psm2), which probe for
#    interconnect hardware: ~0.2 s of every mpirun at 9 ranks, for nothing;
#  - HWLOC_COMPONENTS=-pci,-linuxio: mpirun's topology without its PCI
#    devices (NIC locality: no use on one machine).  Reading PCI config
#    space traps into the hypervisor on a VM: ~0.1 s of CPU per mpirun.
# Together they took a 9-rank MPI_Init + MPI_Finalize under mpirun from
# 0.48 s to 0.20 s on the 2-core VM (Open MPI 4.1.4); MPICH ignores them.
set(ZERO_TEST_ENV "ZERO_PLUGIN_PATH=${ZERO_PLUGIN_BUILD_DIR}" "OMPI_MCA_rmaps_base_oversubscribe=1"
    "OMPI_MCA_pml=ob1" "HWLOC_COMPONENTS=-pci,-linuxio")
set(ZERO_TEST_ENV "${ZERO_TEST_ENV}" CACHE INTERNAL "")

# zero_add_test(NAME n COMMAND ... [TIMEOUT s] [LABELS ...])
function(zero_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "${ZERO_TEST_ENV}")
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# zero_add_mpi_test(NAME n NP k COMMAND exe args... [TIMEOUT s]): runs under
# mpirun --allow-run-as-root --oversubscribe -np k, always with a timeout so
# that a hang fails instead of stalling CI.
function(zero_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;NP;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 180)
  endif()
  zero_add_test(NAME ${T_NAME} TIMEOUT ${T_TIMEOUT} LABELS mpi ${T_LABELS}
    COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np ${T_NP}
            --mca btl self,vader ${T_COMMAND})
endfunction()
