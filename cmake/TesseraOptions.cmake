# Backend switches (AUTO/ON/OFF) and the CPU ISA choice. Each backend records why it is or is
# not built; `tessera info` prints those reasons.
include(CheckCXXSourceRuns)

function(tessera_tristate name doc)
  set(${name} AUTO CACHE STRING "${doc} (AUTO/ON/OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" value)
  if(NOT value MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF, got '${${name}}'")
  endif()
  set(${name} "${value}" PARENT_SCOPE)
endfunction()

tessera_tristate(TESSERA_WITH_CUDA "Build the CUDA backend")
tessera_tristate(TESSERA_WITH_HIP "Build the HIP backend")
tessera_tristate(TESSERA_WITH_KOKKOS "Build the Kokkos backend")
tessera_tristate(TESSERA_WITH_GPU_EMULATION "Build the emulated GPU backend")
tessera_tristate(TESSERA_WITH_MPI "Build the MPI process group (tessera::dist)")

# CPU kernels are compiled for one ISA, chosen at configure time: AVX2+FMA when both the
# compiler and this machine support it, the portable C++ path otherwise.
set(TESSERA_CPU_ISA AUTO CACHE STRING "CPU kernel ISA: AUTO, avx2 or generic")
set_property(CACHE TESSERA_CPU_ISA PROPERTY STRINGS AUTO avx2 generic)
if(TESSERA_CPU_ISA STREQUAL "AUTO")
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    set(CMAKE_REQUIRED_FLAGS "-mavx2 -mfma -mf16c")
    check_cxx_source_runs([=[
      #include <immintrin.h>
      int main() {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 1;
        __m256 a = _mm256_set1_ps(1.f); a = _mm256_fmadd_ps(a, a, a);
        return _mm256_cvtss_f32(a) == 2.f ? 0 : 1;
      }]=] TESSERA_HOST_HAS_AVX2)
    unset(CMAKE_REQUIRED_FLAGS)
  endif()
  if(TESSERA_HOST_HAS_AVX2)
    set(TESSERA_CPU_ISA_RESOLVED avx2)
  else()
    set(TESSERA_CPU_ISA_RESOLVED generic)
  endif()
else()
  set(TESSERA_CPU_ISA_RESOLVED ${TESSERA_CPU_ISA})
endif()
if(TESSERA_CPU_ISA_RESOLVED STREQUAL "avx2")
  set(TESSERA_CPU_ISA_FLAGS -mavx2 -mfma -mf16c)
else()
  set(TESSERA_CPU_ISA_FLAGS "")
endif()

# CUDA must be enabled at the top level (the kernels join the `tessera` target defined in
# core/). AUTO enables it when nvcc is found; the default targets are sm_80 and sm_90.
set(TESSERA_CUDA_ENABLED OFF)
if(NOT TESSERA_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA targets (75 and newer)" FORCE)
    endif()
    enable_language(CUDA)
    # NOTE: CMake 3.25 does not know nvcc's C++20 flag (CUDA 12+ has it); teach it.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(TESSERA_CUDA_ENABLED ON)
  elseif(TESSERA_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_WITH_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
