# Parquet sources (src/data/parquet_reader.cpp) through Apache Arrow's C++
# libraries. Default source: the pyarrow wheel that scripts/setup.sh installs
# into .venv, which ships libarrow, libparquet and their headers, as PyTorch's
# wheel ships LibTorch (Debian has no Arrow package). -DKEEL_ARROW_PYTHON
# picks another Python's pyarrow; -DKEEL_PARQUET=OFF builds without it and
# ON makes a missing pyarrow an error. A keel without Parquet still builds and
# refuses .parquet sources with a message saying why.
set(KEEL_PARQUET "AUTO" CACHE STRING "Parquet sources: AUTO (when pyarrow is found), ON (required), OFF")
set_property(CACHE KEEL_PARQUET PROPERTY STRINGS AUTO ON OFF)
set(KEEL_ARROW_PYTHON "${KEEL_TORCH_PYTHON}" CACHE FILEPATH "Python whose pyarrow provides Arrow's C++ libraries")
set(KEEL_WITH_PARQUET OFF)
set(_keel_parquet_why "KEEL_PARQUET=OFF")
if(NOT KEEL_PARQUET STREQUAL "OFF")
  set(_keel_parquet_why "no pyarrow in ${KEEL_ARROW_PYTHON}")
  if(EXISTS "${KEEL_ARROW_PYTHON}")
    execute_process(
      COMMAND "${KEEL_ARROW_PYTHON}" -c
              "import os, pyarrow; print(pyarrow.get_include()); print(os.path.dirname(pyarrow.__file__)); print(pyarrow.__version__)"
      OUTPUT_VARIABLE _keel_arrow_out ERROR_QUIET RESULT_VARIABLE _keel_arrow_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_keel_arrow_rc EQUAL 0)
      string(REPLACE "\n" ";" _keel_arrow_lines "${_keel_arrow_out}")
      list(GET _keel_arrow_lines 0 KEEL_ARROW_INCLUDE_DIR)
      list(GET _keel_arrow_lines 1 _keel_arrow_dir)
      list(GET _keel_arrow_lines 2 KEEL_ARROW_VERSION)
      # The wheel ships versioned names only (libarrow.so.2600).
      file(GLOB _keel_arrow_libs "${_keel_arrow_dir}/libarrow.so.*" "${_keel_arrow_dir}/libparquet.so.*")
      list(FILTER _keel_arrow_libs INCLUDE REGEX "/lib(arrow|parquet)\\.so\\.[0-9]+$")
      list(LENGTH _keel_arrow_libs _keel_arrow_n)
      if(_keel_arrow_n EQUAL 2 AND EXISTS "${KEEL_ARROW_INCLUDE_DIR}/parquet/arrow/reader.h")
        list(SORT _keel_arrow_libs)  # libarrow, then libparquet
        set(KEEL_ARROW_LIBRARIES ${_keel_arrow_libs})
        set(KEEL_WITH_PARQUET ON)
      else()
        set(_keel_parquet_why "pyarrow ${KEEL_ARROW_VERSION} in ${_keel_arrow_dir} lacks libarrow.so.N, libparquet.so.N or its headers")
      endif()
    endif()
  endif()
endif()
if(KEEL_WITH_PARQUET)
  message(STATUS "keel: Parquet on (Arrow ${KEEL_ARROW_VERSION} from ${KEEL_ARROW_INCLUDE_DIR})")
elseif(KEEL_PARQUET STREQUAL "ON")
  message(FATAL_ERROR "keel: KEEL_PARQUET=ON but ${_keel_parquet_why}. Run scripts/setup.sh (it installs pyarrow), "
                      "or point -DKEEL_ARROW_PYTHON at a Python with pyarrow.")
else()
  message(STATUS "keel: Parquet OFF (${_keel_parquet_why}): .parquet sources will be refused")
endif()
