# The GPU path: CUDA device backend, CUDA optimizer kernels, NCCL comm backend.
#
# Included from the top-level CMakeLists.txt BEFORE add_subdirectory(core):
# CUDA must be enabled before any directory that links CUDA objects is
# processed (else CMake lacks the CUDA link rules there).  Attaching the CUDA
# objects and definitions to the core targets (zero_objs, zero, zero_static)
# is deferred to the end of the top-level directory, when they exist.
#
#   ZERO_WITH_CUDA=AUTO|ON|OFF  AUTO: build when nvcc is found; ON: fail without it.
#   ZERO_WITH_NCCL=AUTO|ON|OFF  AUTO: build when CUDA is on and nccl.h/libnccl are
#                               found (NCCL_ROOT or CUDAToolkit_ROOT or /usr/local/cuda).
#
# Results: ZERO_HAVE_CUDA / ZERO_HAVE_NCCL (CMake variables, and compile
# definitions on zero_objs and everything linking it), target zero_cuda_objs
# (an OBJECT library: kernels/cuda/*.cu and backends/device/cuda/*.c, linked
# into libzero.so and zero_static), ZERO_CUOBJDUMP (path or NOTFOUND).
#
# Architectures: SASS for sm_80 (A100) and sm_90 (H100/H200) plus PTX for
# compute_90 so that newer GPUs JIT it.  Override with -DCMAKE_CUDA_ARCHITECTURES.

set(ZERO_WITH_CUDA "AUTO" CACHE STRING "Build the CUDA device backend and kernels (AUTO|ON|OFF)")
set(ZERO_WITH_NCCL "AUTO" CACHE STRING "Build the NCCL comm backend (AUTO|ON|OFF)")
set_property(CACHE ZERO_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE ZERO_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)

set(ZERO_HAVE_CUDA OFF)
set(ZERO_HAVE_NCCL OFF)

if(NOT ZERO_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    # Debian/NVIDIA installs put nvcc in /usr/local/cuda/bin, often not on PATH.
    find_program(_zero_nvcc nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
    if(_zero_nvcc)
      set(CMAKE_CUDA_COMPILER "${_zero_nvcc}" CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual" CACHE STRING "CUDA architectures")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(ZERO_HAVE_CUDA ON)
  elseif(ZERO_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ZERO_WITH_CUDA=ON but no usable CUDA toolkit (nvcc) was found")
  endif()
endif()

if(ZERO_HAVE_CUDA AND NOT ZERO_WITH_NCCL STREQUAL "OFF")
  # NCCL from PyPI (nvidia-nccl-cu12/cu13, what PyTorch images carry) lives in
  # site-packages/nvidia/<dir>/{include,lib} (nccl, or cu13 in newer wheels) and ships only the
  # versioned libnccl.so.2 (no libnccl.so link): look there too, by both names.
  execute_process(COMMAND python3 -c
    "import nvidia, os; print(';'.join(os.path.join(p, d) for p in nvidia.__path__ for d in sorted(os.listdir(p)) if os.path.exists(os.path.join(p, d, 'include', 'nccl.h'))))"
    OUTPUT_VARIABLE _zero_py_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(ZERO_NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT} ${_zero_py_nccl}
    PATH_SUFFIXES include)
  find_library(ZERO_NCCL_LIBRARY NAMES nccl libnccl.so.2
    HINTS ${NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} ${_zero_py_nccl}
    PATH_SUFFIXES lib lib64)
  if(ZERO_NCCL_INCLUDE_DIR AND ZERO_NCCL_LIBRARY)
    set(ZERO_HAVE_NCCL ON)
    add_library(zero_nccl_lib UNKNOWN IMPORTED)
    set_target_properties(zero_nccl_lib PROPERTIES IMPORTED_LOCATION "${ZERO_NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${ZERO_NCCL_INCLUDE_DIR}")
  elseif(ZERO_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "ZERO_WITH_NCCL=ON but nccl.h / libnccl were not found (set NCCL_ROOT)")
  else()
    # Not silent: a GPU build without NCCL has no multi-GPU collectives.
    message(WARNING "libzero: CUDA found but NCCL not (nccl.h: ${ZERO_NCCL_INCLUDE_DIR}, "
      "libnccl: ${ZERO_NCCL_LIBRARY}); building without the NCCL comm backend. "
      "Set NCCL_ROOT, or -DZERO_WITH_NCCL=OFF to silence this.")
  endif()
elseif(ZERO_WITH_NCCL STREQUAL "ON")
  message(FATAL_ERROR "ZERO_WITH_NCCL=ON needs CUDA (ZERO_WITH_CUDA is OFF or CUDA was not found)")
endif()

message(STATUS "libzero: CUDA backend ${ZERO_HAVE_CUDA} (archs: ${CMAKE_CUDA_ARCHITECTURES}), NCCL backend ${ZERO_HAVE_NCCL}")

if(ZERO_HAVE_CUDA)
  # cuobjdump (for the SASS inspection test): the toolkit's, else the one the
  # PyPI wheel nvidia-cuda-cuobjdump installs (tools/install-deps.sh).
  execute_process(COMMAND python3 -c
    "import nvidia, os; print(';'.join(os.path.join(p, d, 'bin') for p in nvidia.__path__ for d in os.listdir(p)))"
    OUTPUT_VARIABLE _zero_nv_bins OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_program(ZERO_CUOBJDUMP cuobjdump HINTS ${CUDAToolkit_BIN_DIR} ${_zero_nv_bins})
endif()

function(zero_cuda_attach)
  if(ZERO_HAVE_CUDA)
    file(GLOB ZERO_CUDA_SOURCES CONFIGURE_DEPENDS
      "${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu"
      "${CMAKE_SOURCE_DIR}/backends/device/cuda/*.c")
    add_library(zero_cuda_objs OBJECT ${ZERO_CUDA_SOURCES})
    target_include_directories(zero_cuda_objs PUBLIC
      "${CMAKE_SOURCE_DIR}/backends/device/cuda" "${CMAKE_SOURCE_DIR}/kernels/cuda")
    # Same include dirs and definitions as the core objects (abi/, kernels/cpu/
    # for optim_math.h); ZERO_HAVE_CUDA comes from zero_objs below.
    target_link_libraries(zero_cuda_objs PUBLIC zero_objs)
    # cudart_static: libzero.so then needs only the driver (libcuda.so.1,
    # dlopen'ed by cudart) at run time, not a matching libcudart.so.
    target_link_libraries(zero_cuda_objs PUBLIC CUDA::cudart_static)
    # zero_warnings' flags are not language-guarded and nvcc rejects them.
    target_compile_options(zero_cuda_objs PRIVATE
      $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra $<$<BOOL:${ZERO_WERROR}>:-Werror>>)
    target_compile_definitions(zero_cuda_objs PRIVATE _GNU_SOURCE)
    set_target_properties(zero_cuda_objs PROPERTIES
      C_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
      CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
    # Keep nvcc's host pass warning-clean too, without -Werror on CUDA headers.
    target_compile_options(zero_cuda_objs PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>
      # No FMA contraction: optim_math.h is written as separate IEEE operations
      # and the CPU kernels do not contract, so a GPU step matches the CPU's bits.
      $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
    target_compile_definitions(zero_objs PUBLIC ZERO_HAVE_CUDA=1)
    target_include_directories(zero_objs PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
    # Linking an OBJECT library puts its objects into the direct dependents.
    target_link_libraries(zero PRIVATE zero_cuda_objs)
    target_link_libraries(zero_static PUBLIC zero_cuda_objs)

  endif()

  if(ZERO_HAVE_NCCL)
    # backends/comm/comm_nccl*.c are globbed into zero_objs by core/CMakeLists.txt
    # and compile to nothing without ZERO_HAVE_NCCL.
    target_compile_definitions(zero_objs PUBLIC ZERO_HAVE_NCCL=1)
    target_link_libraries(zero_objs PUBLIC zero_nccl_lib CUDA::cudart_static)
    # libzero.so needs libnccl.so.2 at run time.  Where NCCL is not in the
    # loader's default path (a cluster module, a pip wheel), record its
    # directory in libzero's RUNPATH, build and install tree alike, so hosts
    # need no LD_LIBRARY_PATH.  -DZERO_NCCL_RPATH=OFF leaves it to the
    # environment (docs/gpu.md).
    option(ZERO_NCCL_RPATH "Record NCCL's library directory in libzero's RUNPATH" ON)
    get_filename_component(_zero_nccl_dir "${ZERO_NCCL_LIBRARY}" DIRECTORY)
    if(ZERO_NCCL_RPATH AND NOT _zero_nccl_dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      set_property(TARGET zero APPEND PROPERTY BUILD_RPATH "${_zero_nccl_dir}")
      set_property(TARGET zero APPEND PROPERTY INSTALL_RPATH "${_zero_nccl_dir}")
    endif()
  endif()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL zero_cuda_attach)
