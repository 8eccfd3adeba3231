# The CPU kernels' torch-free cores (kernels/cpu/kernel_table.h): the ISA
# dispatch, the kernel configuration, the thread pool and every variant of
# every kernel family. Its own library so that the cores build and are
# tested without LibTorch, and cross-compile for aarch64
# (scripts/test-arm64). Included by the top-level CMakeLists.txt and by
# tests/kernels/cores/CMakeLists.txt (the cross build).
set(ROPESERVE_CORES_DIR ${CMAKE_CURRENT_LIST_DIR})
set(ROPESERVE_CORE_SOURCES
  cpu_features.cc kernel_config.cc kernel_table.cc thread_pool.cc
  packed_linear_generic.cc int8_linear_generic.cc int4_linear_generic.cc
  paged_attention_generic.cc fused_ops_generic.cc logits_summary_generic.cc)
set(ROPESERVE_AVX2_SOURCES
  packed_linear_avx2.cc int8_linear_avx2.cc int4_linear_avx2.cc
  paged_attention_avx2.cc fused_ops_avx2.cc logits_summary_avx2.cc)
set(ROPESERVE_AVX512_SOURCES packed_linear_f32_avx512.cc)
set(ROPESERVE_AVX512_BF16_SOURCES
  packed_linear_avx512.cc paged_attention_avx512.cc fused_ops_avx512.cc logits_summary_avx512.cc)
set(ROPESERVE_AVX512_VNNI_SOURCES int8_linear_avx512.cc int4_linear_avx512.cc)
set(ROPESERVE_AMX_SOURCES packed_linear_amx.cc)
set(ROPESERVE_NEON_SOURCES packed_linear_neon.cc int_linear_neon.cc paged_attention_neon.cc)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  list(APPEND ROPESERVE_CORE_SOURCES ${ROPESERVE_AVX2_SOURCES} ${ROPESERVE_AVX512_SOURCES} ${ROPESERVE_AVX512_BF16_SOURCES}
       ${ROPESERVE_AVX512_VNNI_SOURCES} ${ROPESERVE_AMX_SOURCES})
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  list(APPEND ROPESERVE_CORE_SOURCES ${ROPESERVE_NEON_SOURCES})
endif()
list(TRANSFORM ROPESERVE_CORE_SOURCES PREPEND ${ROPESERVE_CORES_DIR}/)
add_library(ropeserve_kernel_cores STATIC ${ROPESERVE_CORE_SOURCES})
# Each ISA's files get its flags, and only they: the kernel table calls
# them after the run-time check, so the binary runs on any CPU of the
# architecture. The other files are built for the baseline (x86-64, armv8-a).
function(ropeserve_isa_flags flags)
  set(files ${ARGN})
  list(TRANSFORM files PREPEND ${ROPESERVE_CORES_DIR}/)
  set_source_files_properties(${files} PROPERTIES COMPILE_OPTIONS "${flags}")
endfunction()
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  ropeserve_isa_flags("-mavx2;-mfma;-mf16c;-O3" ${ROPESERVE_AVX2_SOURCES})
  ropeserve_isa_flags("-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma;-O3" ${ROPESERVE_AVX512_SOURCES})
  ropeserve_isa_flags("-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512bf16;-mfma;-O3;-Wno-maybe-uninitialized"
                      ${ROPESERVE_AVX512_BF16_SOURCES})
  ropeserve_isa_flags("-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mf16c;-mfma;-O3;-Wno-maybe-uninitialized"
                      ${ROPESERVE_AVX512_VNNI_SOURCES})
  ropeserve_isa_flags("-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512bf16;-mamx-tile;-mamx-bf16;-mfma;-O3"
                      ${ROPESERVE_AMX_SOURCES})
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  ropeserve_isa_flags("-O3" ${ROPESERVE_NEON_SOURCES})
endif()
# The generic variants are references: no contraction of a * b + c into an
# fma they do not ask for (std::fma where they do), on any target.
set_source_files_properties(${ROPESERVE_CORES_DIR}/packed_linear_generic.cc ${ROPESERVE_CORES_DIR}/int8_linear_generic.cc
  ${ROPESERVE_CORES_DIR}/int4_linear_generic.cc ${ROPESERVE_CORES_DIR}/paged_attention_generic.cc
  ${ROPESERVE_CORES_DIR}/fused_ops_generic.cc ${ROPESERVE_CORES_DIR}/logits_summary_generic.cc
  PROPERTIES COMPILE_OPTIONS "-O2;-ffp-contract=off")
get_filename_component(ROPESERVE_CORES_ROOT ${ROPESERVE_CORES_DIR}/../.. ABSOLUTE)
target_include_directories(ropeserve_kernel_cores PUBLIC ${ROPESERVE_CORES_ROOT})
find_package(Threads REQUIRED)
target_link_libraries(ropeserve_kernel_cores PUBLIC Threads::Threads)
set_target_properties(ropeserve_kernel_cores PROPERTIES POSITION_INDEPENDENT_CODE ON)
