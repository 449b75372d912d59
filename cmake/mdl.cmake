# mdl for CMake projects: the runtime as the targets `mdl::runtime` (the headers generated
# code includes) and `mdl::python` (the Python face every model module links, compiled once
# per project), and mdl_add_model(), which compiles a .mdl file into a Python extension
# module at build time:
#
#   include(path/to/mdl/cmake/mdl.cmake)
#   mdl_add_model(TARGET charlm SOURCE charlm.mdl DTYPE f32 DEFINES H=512 E=64)
#
# It needs a Python with mdl's dependencies (pip install -e path/to/mdl), found the usual
# way (set Python_EXECUTABLE to choose one): pybind11 and the BLAS come from it.
include_guard(GLOBAL)
if(CMAKE_VERSION VERSION_LESS 3.25)
  message(FATAL_ERROR "mdl.cmake needs CMake 3.25 or newer (pip install cmake)")
endif()

# A cache entry, not a variable: mdl_add_model() may be called from any directory.
cmake_path(GET CMAKE_CURRENT_LIST_DIR PARENT_PATH _mdl_root)
set(MDL_ROOT "${_mdl_root}" CACHE INTERNAL "mdl's source tree")
option(MDL_NATIVE "Compile models for this machine's CPU (-march=native)" ON)

find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env --modify "PYTHONPATH=path_list_prepend:${MDL_ROOT}" --
          "${Python_EXECUTABLE}" -c
    "import lark, jinja2, pybind11; from codegen.compile.blas import blas; b = blas(); from codegen.compile.flags import CODE_FLAGS, GCC_CODE_FLAGS, OPENMP_LIBRARIES, WIDE_VECTORS; from codegen.compile.runtime import GLUE_OPTIMIZATION, GCC_GLUE_OPTIMIZATION; print(pybind11.get_cmake_dir(), b.include_dir, b.library, ','.join(b.defines), OPENMP_LIBRARIES['gcc'] + ',' + OPENMP_LIBRARIES['clang'], ','.join(CODE_FLAGS), ','.join(GLUE_OPTIMIZATION), WIDE_VECTORS, ','.join(GCC_CODE_FLAGS), ','.join(GCC_GLUE_OPTIMIZATION), sep=';')"
  OUTPUT_VARIABLE _mdl_python OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_VARIABLE _mdl_python_error ERROR_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _mdl_python_failed)
if(_mdl_python_failed)
  # its last line (`ModuleNotFoundError: No module named 'pybind11'`), not the traceback
  string(REGEX REPLACE ".*\n" "" _mdl_python_error "${_mdl_python_error}")
  message(FATAL_ERROR "mdl.cmake: ${Python_EXECUTABLE} cannot run mdl (${_mdl_python_error}): "
                      "install mdl's dependencies into it (pip install -e ${MDL_ROOT}), or "
                      "set Python_EXECUTABLE to a Python that has them")
endif()
list(GET _mdl_python 0 _mdl_pybind11_dir)
list(GET _mdl_python 1 _mdl_blas_include)
list(GET _mdl_python 2 _mdl_blas_library)
list(GET _mdl_python 3 _mdl_blas_defines)
list(GET _mdl_python 4 _mdl_openmp)
list(GET _mdl_python 5 _mdl_code_flags)
list(GET _mdl_python 6 _mdl_glue_flags)
list(GET _mdl_python 7 _mdl_wide_vectors)
list(GET _mdl_python 8 _mdl_gcc_code_flags)
list(GET _mdl_python 9 _mdl_gcc_glue_flags)
string(REPLACE "," ";" _mdl_blas_defines "${_mdl_blas_defines}")
# the OpenMP runtime of this project's C++ compiler (GCC's or Clang's: flags.py's OPENMP_LIBRARIES),
# on which MKL (with GCC) and OpenBLAS run their threads too
string(REPLACE "," ";" _mdl_openmp "${_mdl_openmp}")
list(GET _mdl_openmp 0 _mdl_gomp)
list(GET _mdl_openmp 1 _mdl_omp)
string(REPLACE "," ";" _mdl_code_flags "${_mdl_code_flags}")
string(REPLACE "," ";" _mdl_glue_flags "${_mdl_glue_flags}")
# GCC's own flags (codegen/compile/flags.py's GCC_CODE_FLAGS, runtime.py's
# GCC_GLUE_OPTIMIZATION), given only where this project's C++ compiler is GCC: Clang
# refuses -fno-tree-sink
string(REPLACE "," ";" _mdl_gcc_code_flags "${_mdl_gcc_code_flags}")
string(REPLACE "," ";" _mdl_gcc_glue_flags "${_mdl_gcc_glue_flags}")
foreach(_mdl_flag IN LISTS _mdl_gcc_code_flags)
  list(APPEND _mdl_code_flags "$<$<CXX_COMPILER_ID:GNU>:${_mdl_flag}>")
endforeach()
foreach(_mdl_flag IN LISTS _mdl_gcc_glue_flags)
  list(APPEND _mdl_glue_flags "$<$<CXX_COMPILER_ID:GNU>:${_mdl_flag}>")
endforeach()
cmake_path(GET _mdl_blas_library PARENT_PATH _mdl_blas_lib_dir)
set(pybind11_DIR "${_mdl_pybind11_dir}" CACHE PATH "pybind11's CMake package (from Python)")
find_package(pybind11 CONFIG REQUIRED)

# MKL or OpenBLAS, as codegen/compile/blas.py chooses
add_library(mdl::blas SHARED IMPORTED GLOBAL)
set_target_properties(mdl::blas PROPERTIES
  IMPORTED_LOCATION "${_mdl_blas_library}"
  INTERFACE_INCLUDE_DIRECTORIES "${_mdl_blas_include}"
  INTERFACE_COMPILE_OPTIONS "${_mdl_blas_defines}"
  INTERFACE_LINK_LIBRARIES "$<IF:$<CXX_COMPILER_ID:GNU>,${_mdl_gomp},${_mdl_omp}>"
  # The BLAS lives in a Python package, not a system directory: users find it by RPATH.
  # (Clang finds its own libomp only where it links with -fopenmp.)
  INTERFACE_LINK_OPTIONS
    "LINKER:-rpath,${_mdl_blas_lib_dir};$<$<NOT:$<CXX_COMPILER_ID:GNU>>:-fopenmp>")

# What generated code calls out of line (mdl's own product kernels, the faults kernels
# raise, results' memory), compiled once for every target that links mdl::runtime, for
# this machine's CPU as models are.
add_library(mdl_core STATIC EXCLUDE_FROM_ALL "${MDL_ROOT}/cpp_runtime/src/products.cpp"
                                           "${MDL_ROOT}/cpp_runtime/src/faults.cpp"
                                           "${MDL_ROOT}/cpp_runtime/src/call.cpp")
target_include_directories(mdl_core PUBLIC "${MDL_ROOT}/cpp_runtime")
target_link_libraries(mdl_core PUBLIC mdl::blas)
target_compile_options(mdl_core PRIVATE ${_mdl_code_flags})
target_compile_features(mdl_core PUBLIC cxx_std_17)
set_target_properties(mdl_core PROPERTIES POSITION_INDEPENDENT_CODE ON
                                          CXX_VISIBILITY_PRESET hidden)
# One instruction set for the kernels and everything that includes their headers: the
# kernels' constants (a vector's lanes, a packed panel's width) differ between them, and a
# buffer sized by one and filled by the other overflows.
# With AVX-512, 512-bit vectors in loops too, as codegen/compile/flags.py's machine_flags.
if(MDL_NATIVE)
  set(_mdl_arch -march=native)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS -march=native)
  check_cxx_source_compiles("#ifndef __AVX512F__\n#error no AVX-512\n#endif\nint main() {}"
                            MDL_AVX512)
  unset(CMAKE_REQUIRED_FLAGS)
  if(MDL_AVX512)
    list(APPEND _mdl_arch ${_mdl_wide_vectors})
  endif()
else()
  set(_mdl_arch "")
endif()
# Without a build type CMake passes no -O at all: mdl's product kernels, the runtime and
# each model are then compiled at -O3, as mdl's own builds are (a build type's flags
# otherwise: -O0 -g for Debug).
set(_mdl_optimize "$<$<STREQUAL:$<CONFIG>,>:-O3>")
target_compile_options(mdl_core PRIVATE ${_mdl_arch} ${_mdl_optimize})

add_library(mdl::runtime INTERFACE IMPORTED GLOBAL)
set_target_properties(mdl::runtime PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${MDL_ROOT}/cpp_runtime"
  INTERFACE_LINK_LIBRARIES "mdl::blas;mdl_core"
  # what every mdl compile gets (codegen/compile/flags.py's CODE_FLAGS: OpenMP among them)
  INTERFACE_COMPILE_OPTIONS "${_mdl_code_flags};${_mdl_arch}"
  INTERFACE_COMPILE_FEATURES cxx_std_17)

# Built only when a model needs it. Its pybind11 glue, python_module.cpp, at what mdl's own
# builds compile it with (codegen/compile/runtime.py's GLUE_OPTIMIZATION: -O1 and small
# functions inlined, in two thirds of -O3's time) where the build type leaves it to mdl.
add_library(mdl_python STATIC EXCLUDE_FROM_ALL "${MDL_ROOT}/cpp_runtime/src/python_module.cpp"
                                             "${MDL_ROOT}/cpp_runtime/src/host_device.cpp")
target_link_libraries(mdl_python PUBLIC mdl::runtime pybind11::module)
set_source_files_properties("${MDL_ROOT}/cpp_runtime/src/host_device.cpp"
  TARGET_DIRECTORY mdl_python PROPERTIES COMPILE_OPTIONS "${_mdl_optimize}")
set_source_files_properties("${MDL_ROOT}/cpp_runtime/src/python_module.cpp"
  TARGET_DIRECTORY mdl_python PROPERTIES
  COMPILE_OPTIONS "$<$<STREQUAL:$<CONFIG>,>:${_mdl_glue_flags}>")
set_target_properties(mdl_python PROPERTIES POSITION_INDEPENDENT_CODE ON
                                            CXX_VISIBILITY_PRESET hidden)
add_library(mdl::python ALIAS mdl_python)

# mdl_add_model(TARGET <name> SOURCE <file.mdl> [MODEL <name>] [DTYPE f32|f64]
#               [DEFINES K=V...] [DEPENDS <file>...])
# Emits C++ for SOURCE at build time (`python -m codegen.cli emit`) and compiles it into
# the Python extension module <name>. MODEL picks one model of a file that defines
# several; DEFINES override hyper-parameters (mdlc's -D K=V); DEPENDS names the files
# SOURCE imports, so that editing them emits again (mdl's own files are tracked already).
function(mdl_add_model)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "TARGET;SOURCE;MODEL;DTYPE" "DEFINES;DEPENDS")
  if(ARG_UNPARSED_ARGUMENTS OR NOT ARG_TARGET OR NOT ARG_SOURCE)
    message(FATAL_ERROR "usage: mdl_add_model(TARGET <name> SOURCE <file.mdl> [MODEL <name>]"
                        " [DTYPE f32|f64] [DEFINES K=V...] [DEPENDS <file>...])")
  endif()
  if(NOT ARG_DTYPE)
    set(ARG_DTYPE f32)
  elseif(NOT ARG_DTYPE MATCHES "^f(32|64)$")
    message(FATAL_ERROR "mdl_add_model(${ARG_TARGET}): DTYPE is f32 or f64, not ${ARG_DTYPE}")
  endif()
  cmake_path(ABSOLUTE_PATH ARG_SOURCE NORMALIZE)
  get_source_file_property(generated "${ARG_SOURCE}" GENERATED)
  if(NOT generated AND (NOT EXISTS "${ARG_SOURCE}" OR IS_DIRECTORY "${ARG_SOURCE}"))
    message(SEND_ERROR "mdl_add_model(${ARG_TARGET}): SOURCE ${ARG_SOURCE} is not a file")
    return()  # SEND_ERROR: the other calls are still checked; nothing is generated
  endif()
  # TARGET is the module's name: one `import` takes (checked here, in mdlc's words, not
  # after the runtime compiled); a name CMake keeps for itself (all, test, ...) builds by
  # the target mdl_NAME, as `mdlc emit`'s project does (codegen/compile/cmake.py)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env --modify "PYTHONPATH=path_list_prepend:${MDL_ROOT}" --
            "${Python_EXECUTABLE}" -c
      "import sys; from codegen.compile.cmake import print_model_target; sys.exit(print_model_target(sys.argv[1]))"
      "${ARG_TARGET}"
    OUTPUT_VARIABLE target ERROR_VARIABLE why RESULT_VARIABLE failed
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
  if(failed)
    message(SEND_ERROR "mdl_add_model(${ARG_TARGET}): TARGET is the module's name: ${why}")
    return()
  endif()
  set(options --name ${ARG_TARGET} --dtype ${ARG_DTYPE})
  if(ARG_MODEL)
    list(APPEND options --model ${ARG_MODEL})
  endif()
  foreach(define IN LISTS ARG_DEFINES)
    list(APPEND options -D ${define})
  endforeach()
  # What `mdlc emit` writes for the cpu target (its CMakeLists.txt is not used here).
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/${ARG_TARGET}.emitted")
  set(sources "${dir}/module.cpp")
  # The compiler itself: a changed mdl emits again.
  file(GLOB_RECURSE compiler CONFIGURE_DEPENDS "${MDL_ROOT}/dsl/*" "${MDL_ROOT}/codegen/*.py"
       "${MDL_ROOT}/templates/*")
  list(FILTER compiler EXCLUDE REGEX "/__pycache__/")
  add_custom_command(
    OUTPUT ${sources}
    COMMAND "${CMAKE_COMMAND}" -E env --modify "PYTHONPATH=path_list_prepend:${MDL_ROOT}" --
            "${Python_EXECUTABLE}" -m codegen.cli emit "${ARG_SOURCE}" -o "${dir}" ${options}
    DEPENDS "${ARG_SOURCE}" ${ARG_DEPENDS} ${compiler}
    COMMENT "mdlc emit ${ARG_SOURCE} (${ARG_TARGET})"
    VERBATIM)
  pybind11_add_module(${target} MODULE ${sources})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${ARG_TARGET})
  target_link_libraries(${target} PRIVATE mdl::python)
  target_compile_options(${target} PRIVATE ${_mdl_optimize})  # as mdl_core's
endfunction()
