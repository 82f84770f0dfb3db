// Which kernel table runs (quant-kernels.h): the AVX2 one when the CPU has AVX2, FMA and F16C,
// else the portable one. Compiled for the baseline ISA: nothing here may execute AVX2 code
// before the check.
#include "core/backend/quant-kernels.h"

#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/util/error.h"

namespace ragkv {

// Defined in quant-kernels-avx2.cpp (compiled with -mavx2 -mfma -mf16c): a constant table, so
// taking its address runs none of that file's code.
extern const QuantKernels kQuantKernelsAvx2;
// Defined in quant-kernels-vnni.cpp (compiled with AVX-512 F/BW/VL/VNNI), likewise.
extern const PromptKernels kPromptKernelsVnni16, kPromptKernelsVnni8;
extern const GemmFn kGemmQ6KWideVnni, kGemmQ4KDecodeVnni;
extern const Q4KRows16 kQ4KRows16Vnni;

ActFormat act_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0: return ActFormat::q8_32;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return ActFormat::q8_256;
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::F32: return ActFormat::f32;
    default: break;
  }
  fail("internal: no CPU product kernels for weights of type {}", ggml_type_name(t));
}

ActFormat wide_act_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return ActFormat::q16_32;
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::F32: return ActFormat::f32;
    default: break;
  }
  fail("internal: no CPU wide-activation kernels for weights of type {}", ggml_type_name(t));
}

size_t act_row_bytes(ActFormat f, int64_t k) {
  switch (f) {
    case ActFormat::q8_32: return size_t(k / 32) * sizeof(ActBlock32);
    case ActFormat::q8_256: return size_t(k / 256) * sizeof(ActBlock256);
    case ActFormat::q16_32: return size_t(k / 32) * sizeof(ActBlock32W);
    case ActFormat::f32: break;
  }
  return size_t(k) * sizeof(float);
}

GemmFn gemm_for(const QuantKernels& k, GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return k.gemm_q4_0;
    case GgmlType::Q4_1: return k.gemm_q4_1;
    case GgmlType::Q5_0: return k.gemm_q5_0;
    case GgmlType::Q5_1: return k.gemm_q5_1;
    case GgmlType::Q8_0: return k.gemm_q8_0;
    case GgmlType::Q4_K: return k.gemm_q4_k;
    case GgmlType::Q5_K: return k.gemm_q5_k;
    case GgmlType::Q6_K: return k.gemm_q6_k;
    case GgmlType::F16: return k.gemm_f16;
    case GgmlType::BF16: return k.gemm_bf16;
    default: break;
  }
  fail("internal: no CPU product kernel for weights of type {}", ggml_type_name(t));
}

void dequantize_row_with(const QuantKernels& kernels, GgmlType t, const uint8_t* src, float* dst, int64_t k) {
  switch (t) {
    case GgmlType::Q4_0: return kernels.dequantize_q4_0(src, dst, k);
    case GgmlType::Q4_1: return kernels.dequantize_q4_1(src, dst, k);
    case GgmlType::Q5_0: return kernels.dequantize_q5_0(src, dst, k);
    case GgmlType::Q5_1: return kernels.dequantize_q5_1(src, dst, k);
    case GgmlType::Q8_0: return kernels.dequantize_q8_0(src, dst, k);
    case GgmlType::Q4_K: return kernels.dequantize_q4_k(src, dst, k);
    case GgmlType::Q5_K: return kernels.dequantize_q5_k(src, dst, k);
    case GgmlType::Q6_K: return kernels.dequantize_q6_k(src, dst, k);
    default: return dequantize_row(t, src, dst, k);
  }
}

const QuantKernels* quant_kernels_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C from CPUID leaf 1 (ECX bit 29): clang before 15 does not know "f16c" in
  // __builtin_cpu_supports, and the fuzz build is clang.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) return &kQuantKernelsAvx2;
#endif
  return nullptr;
}

#if defined(__x86_64__) || defined(__i386__)
namespace {
bool has_vnni() {  // asked once (every decode step's products ask)
  static const bool has = [] {
    __builtin_cpu_init();
    return quant_kernels_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}
}  // namespace

const PromptKernels* prompt_kernels_vnni16() { return has_vnni() ? &kPromptKernelsVnni16 : nullptr; }
const PromptKernels* prompt_kernels_vnni8() { return has_vnni() ? &kPromptKernelsVnni8 : nullptr; }
// The 16-bit table without the legacy-block kernels (those types take the dequantised tiles, as
// before they had kernels): reproduces the numerics of stores made by earlier builds, whose key
// does not name the kernel set.
const PromptKernels* prompt_kernels_vnni16_kquants() {
  static const PromptKernels table = [] {
    PromptKernels t = kPromptKernelsVnni16;
    t.name = "avx512-vnni-16-kquants";
    t.gemm_q4_0 = t.gemm_q4_1 = t.gemm_q5_0 = t.gemm_q5_1 = nullptr;
    return t;
  }();
  return has_vnni() ? &table : nullptr;
}
GemmFn gemm_q6_k_wide_vnni() { return has_vnni() ? kGemmQ6KWideVnni : nullptr; }
GemmFn gemm_q4_k_decode_vnni() { return has_vnni() ? kGemmQ4KDecodeVnni : nullptr; }
const Q4KRows16* q4_k_rows16() { return has_vnni() ? &kQ4KRows16Vnni : nullptr; }
#else
const PromptKernels* prompt_kernels_vnni16_kquants() { return nullptr; }
const PromptKernels* prompt_kernels_vnni16() { return nullptr; }
const PromptKernels* prompt_kernels_vnni8() { return nullptr; }
GemmFn gemm_q6_k_wide_vnni() { return nullptr; }
GemmFn gemm_q4_k_decode_vnni() { return nullptr; }
const Q4KRows16* q4_k_rows16() { return nullptr; }
#endif

const PromptKernels* prompt_kernels() {
  static const PromptKernels* chosen = [] () -> const PromptKernels* {
    const char* cpu = std::getenv("RAGKV_CPU_KERNELS");
    if (cpu && std::strcmp(cpu, "scalar") == 0) return nullptr;
    const char* force = std::getenv("RAGKV_PREFILL_KERNELS");
    if (force && std::strcmp(force, "f32") == 0) return nullptr;
    if (force && std::strcmp(force, "int8") == 0) return prompt_kernels_vnni8();
    if (force && std::strcmp(force, "kquants") == 0) return prompt_kernels_vnni16_kquants();
    return prompt_kernels_vnni16();
  }();
  return chosen;
}

GemmFn prompt_gemm_for(const PromptKernels& k, GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K: return k.gemm_q4_k;
    case GgmlType::Q5_K: return k.gemm_q5_k;
    case GgmlType::Q6_K: return k.gemm_q6_k;
    case GgmlType::Q4_0: return k.gemm_q4_0;
    case GgmlType::Q4_1: return k.gemm_q4_1;
    case GgmlType::Q5_0: return k.gemm_q5_0;
    case GgmlType::Q5_1: return k.gemm_q5_1;
    default: return nullptr;
  }
}

const QuantKernels& quant_kernels() {
  static const QuantKernels& chosen = [] () -> const QuantKernels& {
    const char* force = std::getenv("RAGKV_CPU_KERNELS");
    if (force && std::strcmp(force, "scalar") == 0) return quant_kernels_scalar();
    if (const QuantKernels* k = quant_kernels_avx2()) return *k;
    return quant_kernels_scalar();
  }();
  return chosen;
}

}  // namespace ragkv
